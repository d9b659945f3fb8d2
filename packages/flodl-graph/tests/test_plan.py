"""The planner: stable topological order, Kahn levels, cycles."""

from __future__ import annotations

import torch
from torch import nn

from flodl_graph import FlowBuilder, MergeOp, StateAdd
from flodl_graph._plan import order_and_levels
from flodl_graph._spec import NodeRecord


def rec(nid: str, inputs: list[str], refs: list[str] = ()) -> NodeRecord:
    return NodeRecord(nid, "module", None, inputs, nid, refs=list(refs))


def test_levels_group_by_longest_path() -> None:
    nodes = {n.id: n for n in [rec("a", []), rec("b", ["a"]), rec("c", ["a"]),
                               rec("d", ["b"]), rec("e", ["c", "d"])]}  # fmt: skip
    order, levels, stuck = order_and_levels(nodes, {})
    assert order == ["a", "b", "c", "d", "e"]
    assert levels == [["a"], ["b", "c"], ["d"], ["e"]] and stuck == []


def test_order_moves_a_later_input_before_its_reader() -> None:
    # through(s) is recorded before input(["ctx"]), but reads it in the same call.
    g = FlowBuilder(nn.Linear(2, 3)).through(StateAdd()).input(["ctx"]).using(["ctx"]).build()
    assert [n.id for n in g.nodes] == ["linear_1", "input_ctx_3", "state_add_2"]
    assert g.levels == (("linear_1", "input_ctx_3"), ("state_add_2",))
    x, c = torch.randn(2, 2), torch.randn(2, 3)
    torch.testing.assert_close(g(x, c), g.linear_1(x) + c)


def test_cycle_reported() -> None:
    nodes = {n.id: n for n in [rec("a", []), rec("b", ["a"], ["t"]), rec("c", ["b"])]}
    _, _, stuck = order_and_levels(nodes, {"t": "c"})
    assert stuck == ["b", "c"]


def test_forward_refs_are_not_edges() -> None:
    g = (FlowBuilder(nn.Linear(2, 2)).split([StateAdd(), StateAdd()]).using(["out"])
         .merge(MergeOp.MEAN).tag("out").build())  # fmt: skip
    assert g.tag_node("out").level == 2
    assert g.nodes[1].forward_refs == ("out",)
