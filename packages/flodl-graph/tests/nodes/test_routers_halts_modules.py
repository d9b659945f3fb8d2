"""Routers, selectors, halting conditions, StateAdd and Reshape."""

from __future__ import annotations

import pytest
import torch

from flodl_core import ConfigError
from flodl_graph import (
    ArgmaxSelector,
    FixedSelector,
    LearnedHalt,
    Reshape,
    SigmoidRouter,
    SoftmaxRouter,
    StateAdd,
    ThresholdHalt,
)
from flodl_graph.nodes._runtime import halt


def test_routers() -> None:
    x, c = torch.randn(3, 4), torch.randn(3, 4)
    r = SoftmaxRouter(4, 5)
    torch.testing.assert_close(r(x), torch.softmax(r.proj(x), -1))
    torch.testing.assert_close(r.forward_named(x, {"c": c}), torch.softmax(r.proj(x + c), -1))
    s = SigmoidRouter(4, 5)
    torch.testing.assert_close(s(x), torch.sigmoid(s.proj(x)))
    torch.testing.assert_close(s.forward_named(x, {"c": c}), torch.sigmoid(s.proj(x + c)))


def test_selectors() -> None:
    assert FixedSelector(2)(torch.randn(1)) == 2
    sel = ArgmaxSelector(4, 3)
    x = torch.randn(1, 4)
    assert int(sel(x)) == int(sel.proj(x).argmax())
    xb = torch.randn(5, 4)
    assert int(sel(xb)) == int(sel.proj(xb).mean(0).argmax())


def test_halts() -> None:
    s = torch.tensor([[0.5, 3.0]])
    torch.testing.assert_close(ThresholdHalt(1.0)(s), torch.tensor([2.0]))
    h = LearnedHalt(2)
    assert h(s).shape == (1, 1)
    assert halt(torch.tensor([0.1, -5.0])) and not halt(torch.tensor([0.0, 5.0]))
    assert not halt(torch.empty(0)) and halt(1) and not halt(0.0)


def test_state_add_and_reshape() -> None:
    x = torch.randn(2, 3)
    assert StateAdd()(x) is x
    torch.testing.assert_close(StateAdd().forward_named(x, {"a": x, "b": 2 * x}), 4 * x)
    assert Reshape(-1, 3, 1)(x).shape == (2, 3, 1)
    assert Reshape((6,))(x).shape == (6,)
    assert "-1, 3" in repr(Reshape(-1, 3))


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: SoftmaxRouter(0, 2), "in_features must be a positive int"),
        (lambda: SigmoidRouter(4, True), "n_experts must be a positive int"),
        (lambda: ArgmaxSelector(4, 0), "n_branches"),
        (lambda: FixedSelector(-1), "index must be an int >= 0"),
        (lambda: ThresholdHalt("1"), "threshold must be a finite number"),
        (lambda: LearnedHalt(0), "dim must be a positive int"),
        (lambda: Reshape(), "expected positive ints"),
        (lambda: Reshape(2, 0), "expected positive ints"),
        (lambda: Reshape(-1, -1), "at most one -1"),
    ],
)
def test_constructor_arguments_checked(make, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        make()
