"""The planner: stable topological order, Kahn levels, cycles."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from flodl_graph import FlowBuilder, MergeOp, StateAdd
from flodl_graph._plan import (
    _check_children,
    _check_cycle,
    _check_empty,
    _check_pending,
    _check_streams,
    _internal_tags,
    order_and_levels,
    resolve,
)
from flodl_graph._spec import NodeKind, NodeRecord, Recording


def rec(nid: str, inputs: list[str], refs: list[str] = ()) -> NodeRecord:
    return NodeRecord(nid, NodeKind.MODULE, None, tuple(inputs), nid, refs=tuple(refs))


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


def _recording(fb: FlowBuilder) -> Recording:
    return fb._recording()


def test_the_builder_hands_the_planner_one_frozen_recording() -> None:
    fb = FlowBuilder(nn.Linear(2, 2)).tag("a").split([nn.Linear(2, 2), nn.Linear(2, 2)])
    rec = _recording(fb)
    assert [n.id for n in rec.nodes] == ["linear_1", "linear_2", "linear_3"]
    assert rec.streams == ("linear_2", "linear_3") and dict(rec.tags) == {"a": "linear_1"}
    assert rec.nodes[0].tags == ("a",) and rec.nodes[1].inputs == ("linear_1",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.streams = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        rec.tags["b"] = "linear_2"  # type: ignore[index]
    fb.merge()  # the recording does not move with the builder
    assert len(rec.nodes) == 3 and len(_recording(fb).nodes) == 4


def test_resolve_reads_only_the_recording() -> None:
    rec = _recording(FlowBuilder(nn.Linear(2, 2)).through(nn.ReLU()).tag("out"))
    plan, errors = resolve(rec)
    assert errors == [] and plan is not None
    assert [n.id for n in plan.nodes] == ["linear_1", "relu_2"] and plan.output == "relu_2"
    assert plan.tags == {"out": "relu_2"} and plan.nodes[1].name == "out"


def test_each_check_returns_its_own_errors() -> None:
    fb = FlowBuilder(StateAdd()).using(["later"]).split([nn.Linear(2, 2), nn.Linear(2, 2)])
    fb.internal("nope")
    rec = _recording(fb)
    assert _check_pending(rec) == [
        "build(): unresolved forward refs: 'later' (used by state_add_1); tag them later in "
        "the chain or declare them with input([...])"
    ]
    assert _check_streams(rec)[0].startswith("build(): open streams: linear_2, linear_3")
    internal, errors = _internal_tags(rec)
    assert internal == set() and errors == ["internal('nope'): no such tag; known tags: (none)"]
    assert _check_empty(rec) == [] and _check_children(rec) == []
    assert _check_cycle([]) == [] and "cycle detected" in _check_cycle(["a", "b"])[0]
    _, errors = resolve(rec)
    assert len(errors) == 3  # the three problems above, each reported once


def test_an_empty_graph_is_reported_alone() -> None:
    assert "the graph is empty" in _check_empty(_recording(FlowBuilder()))[0]
    assert _check_empty(_recording(FlowBuilder().input(["a"]))) != []
    assert _check_empty(_recording(FlowBuilder().through(nn.ReLU()))) == []


def test_untagged_fork_is_not_an_error() -> None:
    rec = _recording(FlowBuilder(nn.Linear(2, 2)).fork(nn.BatchNorm1d(2)).through(nn.ReLU()))
    assert resolve(rec)[1] == []
