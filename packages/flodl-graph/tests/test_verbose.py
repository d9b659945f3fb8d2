"""FlowBuilder.verbose(): the tree and the parameter summary printed at build."""

from __future__ import annotations

import pytest
from torch import nn

from flodl_core import BuildError
from flodl_graph import FlowBuilder


def _builder() -> FlowBuilder:
    enc = FlowBuilder(nn.Linear(2, 3)).label("enc").build()
    return FlowBuilder(enc).through(nn.Linear(3, 1)).tag("head").label("model")


def test_verbose_build_prints_the_tree_and_the_parameters(capsys) -> None:
    g = _builder().verbose().build()
    out = capsys.readouterr().out
    assert out == f"{g.tree_summary()}\n{g.param_summary()}\n"
    lines = out.splitlines()
    assert lines[0] == f"model [hash: {g.short_hash()}]"
    assert "+-- tags: head" in lines and "+-- params: 13" in lines
    assert "parameters: 13 total, 13 trainable, 0 frozen" in lines
    assert any(line.split()[:3] == ["enc", "9", "69.2%"] for line in lines)


def test_quiet_by_default_and_switchable_off(capsys) -> None:
    _builder().build()
    _builder().verbose().verbose(False).build()
    assert capsys.readouterr().out == ""


def test_a_failing_build_prints_nothing(capsys) -> None:
    fb = FlowBuilder(nn.Linear(2, 2)).split([nn.Linear(2, 2), nn.Linear(2, 2)]).verbose()
    with pytest.raises(BuildError, match="open streams"):
        fb.build()
    assert capsys.readouterr().out == ""
