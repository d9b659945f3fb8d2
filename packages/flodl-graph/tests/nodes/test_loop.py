"""Loops: for_n / while_cond / until_cond against hand-written loops, halting rules, reset."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from flodl_core import ConfigError
from flodl_graph import FlowBuilder, LearnedHalt, ThresholdHalt
from flodl_graph.nodes import Loop


class Counting(nn.Module):
    """x -> x + 1 (no params), counting calls and resets."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.resets = 0

    def reset(self) -> None:
        self.resets += 1

    def forward(self, x):
        self.calls += 1
        return x + 1


class Refd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)

    def forward_named(self, x, refs):
        return torch.tanh(self.lin(x) + refs["ctx"])


def test_for_n_bptt_matches_hand_loop(parity) -> None:
    a = nn.Linear(3, 4)
    block = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.LayerNorm(4))
    body = FlowBuilder().also(block).build()
    g = FlowBuilder(a).loop_body(body).for_n(5).through(nn.Identity()).build()

    def hand(x):
        h = a(x)
        for _ in range(5):
            h = h + block(h)
        return h

    parity(g, hand, [*a.parameters(), *block.parameters()], torch.randn(2, 3))
    assert "loop_2.body.sequential_2.0.weight" in dict(g.named_parameters())
    assert g.nodes[1].kind == "loop"


@pytest.mark.parametrize(("start", "runs"), [(0.0, 3), (2.5, 0), (4.0, 0), (-10.0, 5)])
def test_while_checks_before_each_iteration(start, runs) -> None:
    body = Counting()
    g = FlowBuilder().loop_body(body).while_cond(ThresholdHalt(2.0), 5).build()
    out = g(torch.full((1, 2), start))
    assert body.calls == runs and body.resets == 1
    assert out.equal(torch.full((1, 2), start + runs))


@pytest.mark.parametrize(("start", "runs"), [(0.0, 3), (2.5, 1), (-10.0, 5), (10.0, 1)])
def test_until_checks_after_each_iteration_but_the_last(start, runs) -> None:
    body = Counting()
    cond = ThresholdHalt(2.0)
    checks = []
    cond.register_forward_hook(lambda m, i, o: checks.append(float(o)))
    g = FlowBuilder().loop_body(body).until_cond(cond, 5).build()
    out = g(torch.full((1, 2), start))
    assert body.calls == runs
    assert out.equal(torch.full((1, 2), start + runs))
    assert len(checks) == min(runs, 4)  # never after the last allowed iteration


def test_until_matches_hand_loop_with_learned_halt(parity) -> None:
    body = nn.Linear(4, 4)
    halt = LearnedHalt(4)
    g = FlowBuilder().loop_body(body).until_cond(halt, 6).build()

    def hand(x):
        for i in range(6):
            x = body(x)
            if i < 5 and halt(x).reshape(-1)[0].item() > 0:
                break
        return x

    parity(g, hand, list(body.parameters()), torch.randn(3, 4))
    assert halt.proj.weight.grad is None  # the decision carries no gradient


def test_loop_refs_fixed_for_all_iterations(parity) -> None:
    body = Refd()
    g = FlowBuilder().input(["ctx"]).loop_body(body).for_n(3).using(["ctx"]).build()

    def hand(x, ctx):
        for _ in range(3):
            x = torch.tanh(body.lin(x) + ctx)
        return x

    parity(g, hand, list(body.parameters()), torch.randn(2, 4), torch.randn(2, 4))


def test_loop_module_forward_agrees_with_graph() -> None:
    body = nn.Linear(4, 4)
    g = FlowBuilder().loop_body(body).until_cond(ThresholdHalt(0.5), 4).build()
    x = torch.randn(2, 4)
    loop = g.nodes[1].module
    assert isinstance(loop, Loop)
    torch.testing.assert_close(loop(x), g(x))
    assert "until_cond(4)" in repr(loop)


def test_loop_errors() -> None:
    from flodl_core import BuildError

    with pytest.raises(BuildError) as info:
        (FlowBuilder(nn.Linear(2, 2)).loop_body(nn.Linear(2, 2)).while_cond(ThresholdHalt(0), 0)
         .loop_body(nn.Linear(2, 2)).until_cond("cond", 3)
         .loop_body(nn.Linear(2, 2)).for_n(2.5)
         .loop_body(nn.Linear(2, 2)).for_n(2).using(["x"]).build())  # fmt: skip
    errs = info.value.errors
    assert "max_iter must be an int >= 1, got 0" in errs[0]
    assert "expected an nn.Module, got str" in errs[1]
    assert "n must be an int >= 1, got 2.5" in errs[2]
    assert "the loop body Linear of loop_2 does not support .using() refs" in errs[3]


class _Says(nn.Module):
    """A halting condition returning a fixed non-tensor value."""

    def __init__(self, value: object) -> None:
        super().__init__()
        self.value = value

    def forward(self, state: torch.Tensor) -> object:
        return self.value


@pytest.mark.parametrize("rule", ["while_cond", "until_cond"])
@pytest.mark.parametrize("value", ["yes", None])
def test_a_condition_returning_no_number_names_the_loop(rule: str, value: object) -> None:
    loop = FlowBuilder(nn.Linear(2, 2)).loop_body(nn.Linear(2, 2))
    g = getattr(loop, rule)(_Says(value), 3).build()
    said = f"loop_2: the halting condition returned {type(value).__name__}; expected a tensor"
    with pytest.raises(ConfigError, match=said):
        g(torch.randn(1, 2))


@pytest.mark.parametrize("value", [True, 1, 0.5, np.bool_(True), np.float32(1.0)])
def test_a_condition_may_return_a_python_or_numpy_number(value: object) -> None:
    g = FlowBuilder(nn.Linear(2, 2)).loop_body(nn.Linear(2, 2)).while_cond(_Says(value), 3).build()
    assert g(torch.randn(1, 2)).shape == (1, 2)  # halts at once: the body never runs
