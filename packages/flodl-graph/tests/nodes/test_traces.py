"""Loop bodies that publish per-iteration traces: LoopBody, TraceEmit, Loop.traces."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

from flodl_core import ConfigError
from flodl_graph import FlowBuilder, LoopBody, ThresholdHalt, TraceEmit
from flodl_graph.nodes import Loop


class Step(LoopBody):
    """state + lin(state) (+ the ref ``ctx``), publishing the step's norm and the new state."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def step(self, state, refs, emit: TraceEmit):
        nxt = state + self.lin(state) + sum(refs.values(), torch.zeros(()))
        emit.publish("norm", nxt.norm())
        emit.publish("state", nxt)
        return nxt


def test_a_loop_keeps_one_trace_value_per_iteration() -> None:
    body = Step()
    loop = Loop(body, "for", 4)
    x = torch.randn(2, 3)
    out = loop(x)
    h, states = x, []
    for _ in range(4):
        h = h + body.lin(h)
        states.append(h)
    torch.testing.assert_close(out, h)
    assert len(loop.traces["norm"]) == 4 and body.resets == 1
    for got, want in zip(loop.traces["state"], states, strict=True):
        torch.testing.assert_close(got, want)
    loop(x[:1])  # a new call starts new traces
    assert len(loop.traces["state"]) == 4 and loop.traces["state"][0].shape == (1, 3)


def test_refs_reach_step_and_are_the_same_every_iteration() -> None:
    body = Step()
    ctx = torch.randn(2, 3)
    g = FlowBuilder().input(["ctx"]).loop_body(body).for_n(2).using(["ctx"]).build()
    x = torch.randn(2, 3)
    h = x
    for _ in range(2):
        h = h + body.lin(h) + ctx
    torch.testing.assert_close(g(x, ctx), h)


def test_publishing_a_name_twice_in_one_iteration_is_an_error() -> None:
    class Twice(LoopBody):
        def step(self, state, refs, emit):
            emit.publish("a", state)
            emit.publish("a", state)
            return state

    g = FlowBuilder(nn.Identity()).loop_body(Twice()).for_n(2).build()
    with pytest.raises(ConfigError, match="loop_2: the loop body published trace 'a' twice"):
        g(torch.zeros(1, 2))


def test_a_trace_value_must_be_a_tensor() -> None:
    class Number(LoopBody):
        def step(self, state, refs, emit):
            emit.publish("cost", 0.5)  # used to be kept, then fail in end_step()'s detach
            return state

    g = FlowBuilder(nn.Identity()).loop_body(Number()).for_n(2).build()
    with pytest.raises(ConfigError, match="loop_2: the loop body published trace 'cost' as a "
                       "float; expected a tensor"):  # fmt: skip
        g(torch.zeros(1, 2))
    with pytest.raises(ConfigError, match="trace 'cost' as a float"):
        Number()(torch.zeros(1, 2))


def test_a_trace_name_is_a_path_segment() -> None:
    class Dotted(LoopBody):
        def step(self, state, refs, emit):
            emit.publish("a.b", state)
            return state

    with pytest.raises(ConfigError, match=r"cannot publish a trace: invalid tag 'a\.b'"):
        Loop(Dotted(), "for", 1)(torch.zeros(1))
    with pytest.raises(ConfigError, match=r"invalid tag 'a\.b'"):
        Dotted()(torch.zeros(1))


def test_a_body_called_directly_drops_its_traces() -> None:
    body = Step()
    x = torch.randn(2, 3)
    torch.testing.assert_close(body(x), x + body.lin(x))
    torch.testing.assert_close(body.forward_named(x, {"c": x}), 2 * x + body.lin(x))


def test_a_loop_body_must_define_step() -> None:
    class NoStep(LoopBody):
        pass

    with pytest.raises(TypeError, match="abstract"):
        NoStep()  # type: ignore[abstract]


def test_while_loop_that_never_runs_has_no_traces() -> None:
    loop = Loop(Step(), "while", 3, ThresholdHalt(-100.0))
    loop(torch.zeros(1, 3))
    assert loop.traces == {}


def test_traces_are_detached_by_detach_state_and_dropped_by_copies() -> None:
    g = FlowBuilder(nn.Linear(3, 3)).loop_body(Step()).for_n(2).build()
    g(torch.randn(1, 3))
    loop = g.nodes[1].module
    assert loop.traces["norm"][0].requires_grad
    g.detach_state()
    assert not loop.traces["norm"][0].requires_grad and len(loop.traces["norm"]) == 2
    g(torch.randn(1, 3))
    clone = copy.deepcopy(g)  # would fail on non-leaf tensors with history
    assert clone.nodes[1].module.traces == {}
    assert pickle.loads(pickle.dumps(loop)).traces == {}
