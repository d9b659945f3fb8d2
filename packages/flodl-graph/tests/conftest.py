"""Shared fixtures: a parity check of a graph against hand-written PyTorch, and the small graph
tree the tree, freeze and observation tests address by path."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import SimpleNamespace

import pytest
import torch
from torch import Tensor, nn

from flodl_graph import FlowBuilder, Graph


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


# --- a small tree: model = encoder(scan -> read) -> head (+ a scalar side output) -----------


class Mean(nn.Module):
    def forward(self, x: Tensor) -> Tensor:  # (B, C) -> ()
        return x.mean()


def make_scan(width: int = 8) -> Graph:  # (B, 4) -> (B, width); '_raw' is internal
    lin = nn.Linear(4, width)
    return FlowBuilder(lin).tag("_raw").through(nn.Tanh()).tag("hidden").label("scan").build()


def make_read(width: int = 8) -> Graph:  # (B, width) -> (B, 3); 'secret' marked internal
    b = FlowBuilder(nn.Linear(width, 3)).tag("confidence").through(nn.Identity()).tag("secret")
    return b.internal("secret").label("read").build()


def make_encoder(width: int = 8) -> Graph:
    return FlowBuilder(make_scan(width)).through(make_read(width)).label("encoder").build()


def make_model(width: int = 8) -> Graph:  # (B, 4) -> (B, 2); tags 'head', 'score' (scalar)
    b = FlowBuilder(make_encoder(width)).through(nn.Linear(3, 2)).tag("head")
    return b.fork(Mean()).tag("score").build()


@pytest.fixture
def tree() -> SimpleNamespace:
    """The tree's builders: ``scan``, ``read``, ``encoder``, ``model`` (each takes ``width``)
    and ``Mean``, the scalar side output's module."""
    return SimpleNamespace(
        scan=make_scan, read=make_read, encoder=make_encoder, model=make_model, Mean=Mean
    )


@pytest.fixture
def model() -> Graph:
    """The tree, seeded (a test file with its own variant overrides this fixture)."""
    torch.manual_seed(0)
    return make_model()


@pytest.fixture
def x() -> Tensor:
    """(5, 4): one batch for the tree."""
    return torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
