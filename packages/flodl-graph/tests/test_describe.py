"""print(graph) shows the structure; graph.summary prints output shapes and parameter counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_core import ConfigError
from flodl_graph import FlowBuilder, Graph, StateAdd


def demo() -> Graph:
    inner = FlowBuilder(nn.Linear(8, 8)).label("inner").build()
    return (
        FlowBuilder(nn.Linear(2, 8)).tag("h").through(nn.GELU()).also(nn.Linear(8, 8))
        .split([nn.Linear(8, 8), nn.Tanh()]).merge("mean").loop_body(nn.Linear(8, 8)).for_n(3)
        .through(inner).through(nn.BatchNorm1d(8)).through(nn.Linear(8, 1)).label("demo").build()
    )  # fmt: skip


def test_print_shows_the_structure() -> None:
    g = demo()
    assert repr(g) == str(g)
    lines = str(g).splitlines()
    text = "\n".join(" ".join(line.split()) for line in lines)  # column widths aside
    assert lines[0].startswith(f"Graph 'demo' (hash {g.short_hash()}, 11 nodes, ")
    assert "linear_1 Linear(in_features=2, out_features=8, bias=True) #h" in text
    assert "linear_3 residual branch: Linear(in_features=8" in text
    assert "add_4 add (residual sum) <- gelu_2, linear_3" in text
    assert "tanh_6 split branch: Tanh() <- add_4" in text
    assert "merge_7 merge mean <- linear_5, tanh_6" in text
    assert "loop_8 loop for_n(3): Linear(in_features=8, out_features=8" in text
    assert "graph_9 graph 'inner' (1 nodes" in text
    assert lines[-1] == "  output: linear_11"


def test_print_shows_refs() -> None:
    g = FlowBuilder(StateAdd()).using(["mem"]).tag("mem").build()
    assert "state_add_1  StateAdd()  <- mem(ref; previous call)  #mem" in str(g)


def test_summary_lists_shapes_and_parameters_and_changes_nothing() -> None:
    g = demo()
    g.train()
    bn = g.get_submodule("batch_norm1d_10")
    stats = bn.running_mean.clone()
    lines: list[str] = []
    g.summary((4, 2), print_fn=lines.append)
    (text,) = lines
    rows = {line.split()[0]: line for line in text.splitlines()[2:-2]}
    assert rows["linear_1"].endswith("[4, 8]            24")
    assert "[4, 1]" in rows["linear_11"] and rows["linear_11"].endswith(" 9")
    assert "merge mean" in rows["merge_7"]
    total = sum(p.numel() for p in g.parameters())
    assert text.splitlines()[-1] == f"total parameters: {total:,} (trainable {total:,}, frozen 0)"
    assert g.training and bn.training and torch.equal(bn.running_mean, stats)
    assert not hasattr(g, "_shape_log")


def test_summary_prints_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    FlowBuilder(nn.Linear(3, 2)).build().summary((5, 3))
    assert "[5, 2]" in capsys.readouterr().out


def test_summary_takes_tensors_and_auxiliary_inputs() -> None:
    g = FlowBuilder(nn.Embedding(10, 4)).build()
    out: list[str] = []
    g.summary(torch.tensor([[1, 2, 3]]), print_fn=out.append)
    assert "[1, 3, 4]" in out[0]
    aux = FlowBuilder().input(["ctx"]).through(StateAdd()).using(["ctx"]).build()
    aux.summary((2, 3), ctx=(2, 3), print_fn=out.append)
    assert "[2, 3]" in out[1]


@pytest.mark.parametrize(
    ("shape", "kwargs", "match"),
    [
        ("784", {}, r"input_shape must be a shape .* got '784'"),
        ((2, -1), {}, r"input_shape must be a shape"),
        ((2, 3), {"nope": (1,)}, r"unknown inputs \['nope'\]"),
    ],
)
def test_summary_bad_input(shape: object, kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FlowBuilder(nn.Linear(3, 2)).build().summary(shape, **kwargs)
