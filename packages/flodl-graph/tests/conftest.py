"""Shared fixtures: a parity check of a graph against hand-written PyTorch."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch
from torch import Tensor, nn


def _grads(params: Sequence[nn.Parameter]) -> list[Tensor | None]:
    return [None if p.grad is None else p.grad.clone() for p in params]


def check_parity(
    graph: Callable[..., Tensor],
    hand: Callable[..., Tensor],
    params: Sequence[nn.Parameter],
    *inputs: Tensor,
    atol: float = 1e-6,
) -> Tensor:
    """Forward values and parameter/input gradients of ``graph`` and ``hand`` agree.

    Both run on the same modules (so the same weights); grads are compared at ``atol``.
    Returns the graph's output.
    """
    leaves = [i.detach().clone().requires_grad_(i.is_floating_point()) for i in inputs]
    outs, grads, in_grads = [], [], []
    for fn in (graph, hand):
        for p in params:
            p.grad = None
        xs = [x.detach().clone().requires_grad_(x.requires_grad) for x in leaves]
        y = fn(*xs)
        weights = torch.linspace(-1, 1, y.numel()).reshape(y.shape)
        (y * weights).sum().backward()
        outs.append(y.detach())
        grads.append(_grads(params))
        in_grads.append([x.grad for x in xs])
    torch.testing.assert_close(outs[0], outs[1], atol=atol, rtol=0)
    for name, (a, b) in enumerate(zip(grads[0], grads[1], strict=True)):
        assert (a is None) == (b is None), f"param {name}: grad presence differs"
        if a is not None:
            torch.testing.assert_close(a, b, atol=atol, rtol=0, msg=f"param {name} grad")
    for a, b in zip(in_grads[0], in_grads[1], strict=True):
        if a is not None or b is not None:
            torch.testing.assert_close(a, b, atol=atol, rtol=0)
    return outs[0]


@pytest.fixture
def parity() -> Callable[..., Tensor]:
    return check_parity


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
