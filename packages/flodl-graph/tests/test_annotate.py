"""An exception inside a built graph names the node, its module and the shapes it received."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import traceback

import pytest
import torch
from torch import nn

from flodl_graph import FlowBuilder


def _notes(exc: BaseException) -> list[str]:
    return list(getattr(exc, "__notes__", []))


def test_shape_error_names_the_node_and_input_shapes() -> None:
    g = (FlowBuilder(nn.Linear(2, 4)).tag("h").through(nn.ReLU())
         .through(nn.Linear(5, 1)).tag("head").label("mlp").build())  # fmt: skip
    with pytest.raises(RuntimeError, match="cannot be multiplied") as info:
        g(torch.randn(3, 2))
    (note,) = _notes(info.value)
    assert "graph 'mlp', node 'linear_3'" in note
    assert "Linear(in_features=5, out_features=1" in note
    assert "submodule 'head'" in note and "tags ['head']" in note
    assert "relu_2: [3, 4] float32" in note


def test_merge_failure_names_the_op() -> None:
    g = FlowBuilder(nn.Linear(2, 4)).split([nn.Linear(4, 4), nn.Linear(4, 3)]).merge("add").build()
    with pytest.raises(RuntimeError) as info:
        g(torch.randn(3, 2))
    (note,) = _notes(info.value)
    assert "node 'merge_4' (merge op)" in note
    assert "linear_2: [3, 4] float32, linear_3: [3, 3] float32" in note


def test_nested_graphs_add_one_note_each() -> None:
    inner = FlowBuilder(nn.Linear(4, 4)).through(nn.Linear(3, 1)).label("inner").build()
    outer = FlowBuilder(nn.Linear(2, 4)).through(inner).build()
    with pytest.raises(RuntimeError) as info:
        outer(torch.randn(3, 2))
    inner_note, outer_note = _notes(info.value)
    assert "graph 'inner', node 'linear_2'" in inner_note
    assert "node 'graph_2'" in outer_note or "node 'inner'" in outer_note


def test_success_path_adds_nothing_and_user_errors_pass_through() -> None:
    class Boom(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise KeyError("mine")

    g = FlowBuilder(nn.Linear(2, 2)).through(Boom()).build()
    with pytest.raises(KeyError, match="mine") as info:
        g(torch.randn(1, 2))
    assert "node 'boom_2'" in _notes(info.value)[0]
    ok = FlowBuilder(nn.Linear(2, 2)).build()
    assert ok(torch.randn(1, 2)).shape == (1, 2)


def test_traceback_module_shows_the_generated_line() -> None:
    g = FlowBuilder(nn.Linear(2, 4)).through(nn.Linear(5, 1)).build()
    with pytest.raises(RuntimeError) as info:
        g(torch.randn(3, 2))
    text = "".join(traceback.format_exception(info.value))
    assert "linear_2 = _m['linear_2'](linear_1)" in text


def test_uncaught_exception_shows_the_generated_line() -> None:
    """The interpreter's own excepthook (C code on 3.11) prints the generated statement."""
    script = textwrap.dedent(
        """
        import torch
        from torch import nn
        from flodl_graph import FlowBuilder
        g = FlowBuilder(nn.Linear(2, 4)).through(nn.Linear(5, 1)).build()
        g(torch.randn(3, 2))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 1
    assert "linear_2 = _m['linear_2'](linear_1)" in proc.stderr
    assert "node 'linear_2'" in proc.stderr
