"""Triplet, cosine-embedding, hinge-embedding and margin-ranking losses against torch."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import flodl_core as fc
from flodl_core import ConfigError, ShapeError

G = torch.Generator().manual_seed(0)


def _grads(fn, *xs: torch.Tensor, **kw) -> tuple[torch.Tensor, list[torch.Tensor]]:
    leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in xs]
    y = fn(*leaves, **kw)
    grads = torch.autograd.grad(
        y.sum(), [v for v in leaves if v.requires_grad], allow_unused=True, materialize_grads=True
    )
    return y.detach(), list(grads)


def _same(ours, ref, *xs, **kw) -> None:
    y, g = _grads(ours, *xs, **kw)
    yr, gr = _grads(ref, *xs, **kw)
    torch.testing.assert_close(y, yr)
    for a, b in zip(g, gr, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_embedding_losses_match_torch(reduction: str) -> None:
    a, p, n = (torch.randn(5, 8, dtype=torch.float64, generator=G) for _ in range(3))
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    kw = {"reduction": reduction}
    _same(fc.triplet_margin_loss, F.triplet_margin_loss, a, p, n, margin=0.5, swap=True, **kw)
    _same(fc.cosine_embedding_loss, F.cosine_embedding_loss, a, p, sign, margin=0.2, **kw)
    _same(fc.hinge_embedding_loss, F.hinge_embedding_loss, a[:, 0], sign, margin=0.7, **kw)
    _same(fc.margin_ranking_loss, F.margin_ranking_loss, a[:, 0], p[:, 0], sign, margin=0.1, **kw)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: fc.triplet_margin_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4)),
         ShapeError, "negative has shape"),
        (lambda: fc.triplet_margin_loss(torch.zeros(2, 3, 1), torch.zeros(2, 3, 1),
                                        torch.zeros(2, 3, 1)),
         ShapeError, r"anchor must be \(N, D\)"),
        (lambda: fc.triplet_margin_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3),
                                        margin=-1.0),
         ConfigError, "margin must be"),
        (lambda: fc.cosine_embedding_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3)),
         ShapeError, r"target has shape \(3,\), expected \(2,\)"),
        (lambda: fc.cosine_embedding_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2),
                                          margin=2.0),
         ConfigError, r"margin must be a finite number in \[-1, 1\]"),
        (lambda: fc.hinge_embedding_loss(torch.zeros(3), torch.ones(3, 1)),
         ShapeError, "target has shape"),
        (lambda: fc.margin_ranking_loss(torch.zeros(3), torch.zeros(3), torch.ones(2)),
         ShapeError, "target has shape"),
        (lambda: fc.triplet_margin_loss([[0.0]], torch.zeros(1, 1), torch.zeros(1, 1)),
         TypeError, "anchor must be a torch.Tensor, got list"),
        (lambda: fc.cosine_embedding_loss(torch.zeros(2, 3), torch.zeros(2, 3), [1, -1]),
         TypeError, "target must be a torch.Tensor, got list"),
        (lambda: fc.margin_ranking_loss(torch.zeros(3), torch.zeros(3), 1.0),
         TypeError, "target must be a torch.Tensor, got float"),
    ],
)  # fmt: skip
def test_bad_inputs(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()
