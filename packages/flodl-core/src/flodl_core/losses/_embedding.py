"""Metric-learning and ranking losses over pairs or triplets of embeddings."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .._checks import check_finite
from .._errors import ConfigError, ShapeError
from ._checks import check_reduction, non_negative, same_shape, tensor_arg


def _embeddings(loss: str, x: torch.Tensor, name: str) -> None:
    tensor_arg(loss, x, name)
    if x.dim() not in (1, 2):
        raise ShapeError(f"{loss}: {name} must be (N, D) or (D,), got shape {tuple(x.shape)}")


def triplet_margin_loss(
    anchor: torch.Tensor,
    positive: torch.Tensor,
    negative: torch.Tensor,
    margin: float = 1.0,
    p: float = 2.0,
    eps: float = 1e-6,
    swap: bool = False,
    reduction: str = "mean",
) -> torch.Tensor:
    """``max(d(a, p) − d(a, n) + margin, 0)`` with the ``p``-norm distance. All ``(N, D)``."""
    check_reduction("triplet_margin_loss", reduction)
    non_negative("triplet_margin_loss", "margin", margin)
    if not p > 0:
        raise ConfigError(f"triplet_margin_loss: p must be > 0, got {p!r}")
    _embeddings("triplet_margin_loss", anchor, "anchor")
    same_shape("triplet_margin_loss", anchor, positive, "anchor", "positive")
    same_shape("triplet_margin_loss", anchor, negative, "anchor", "negative")
    return F.triplet_margin_loss(
        anchor, positive, negative, margin=margin, p=p, eps=eps, swap=swap, reduction=reduction
    )


def cosine_embedding_loss(
    x1: torch.Tensor,
    x2: torch.Tensor,
    target: torch.Tensor,
    margin: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """``1 − cos(x1, x2)`` where ``target = 1``, ``max(0, cos(x1, x2) − margin)`` where ``−1``.

    ``x1, x2: (N, D)``, ``target: (N,)`` of ±1; ``margin`` in [−1, 1].
    """
    check_reduction("cosine_embedding_loss", reduction)
    check_finite(margin, "margin", ge=-1.0, le=1.0, where="cosine_embedding_loss")
    _embeddings("cosine_embedding_loss", x1, "x1")
    same_shape("cosine_embedding_loss", x1, x2, "x1", "x2")
    tensor_arg("cosine_embedding_loss", target, "target")
    if target.shape != x1.shape[:-1]:
        raise ShapeError(
            f"cosine_embedding_loss: target has shape {tuple(target.shape)}, expected "
            f"{tuple(x1.shape[:-1])} (one ±1 label per pair)"
        )
    return F.cosine_embedding_loss(x1, x2, target, margin=margin, reduction=reduction)


def hinge_embedding_loss(
    input: torch.Tensor, target: torch.Tensor, margin: float = 1.0, reduction: str = "mean"
) -> torch.Tensor:
    """``input`` where ``target = 1``, ``max(0, margin − input)`` where ``−1``. Equal shapes."""
    check_reduction("hinge_embedding_loss", reduction)
    same_shape("hinge_embedding_loss", input, target, "input", "target")
    return F.hinge_embedding_loss(input, target, margin=margin, reduction=reduction)


def margin_ranking_loss(
    x1: torch.Tensor,
    x2: torch.Tensor,
    target: torch.Tensor,
    margin: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """``max(0, −target·(x1 − x2) + margin)``: ``target = 1`` means x1 should rank higher."""
    check_reduction("margin_ranking_loss", reduction)
    same_shape("margin_ranking_loss", x1, x2, "x1", "x2")
    same_shape("margin_ranking_loss", x1, target, "x1", "target")
    return F.margin_ranking_loss(x1, x2, target, margin=margin, reduction=reduction)
