"""StateAdd: identity forward, x + Σ refs through forward_named."""

from __future__ import annotations

import pytest
import torch

from flodl_core import ShapeError, StateAdd


def test_forward_is_identity() -> None:
    x = torch.randn(3, 4)
    assert StateAdd()(x) is x


def test_forward_named_sums_refs_with_gradients() -> None:
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    a = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    y = StateAdd().forward_named(x, {"a": a, "b": b})
    torch.testing.assert_close(y, x + a + b)
    (y * torch.arange(6.0, dtype=torch.float64).view(2, 3)).sum().backward()
    w = torch.arange(6.0, dtype=torch.float64).view(2, 3)
    for t in (x, a, b):
        torch.testing.assert_close(t.grad, w)


def test_forward_named_without_refs_is_identity() -> None:
    x = torch.randn(4)
    assert torch.equal(StateAdd().forward_named(x, {}), x)


def test_forward_named_rejects_broadcasting_ref() -> None:
    with pytest.raises(ShapeError, match=r"ref 'memory' has shape \(1, 3\).*\(2, 3\)"):
        StateAdd().forward_named(torch.zeros(2, 3), {"memory": torch.zeros(1, 3)})
