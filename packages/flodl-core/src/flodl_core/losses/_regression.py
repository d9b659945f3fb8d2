"""Regression losses: element-wise distances between a prediction and a target of equal shape."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from ._checks import check_reduction, non_negative, positive, same_shape


def mse_loss(pred: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean squared error ``(pred − target)²``. ``pred, target: (*)`` of equal shape."""
    check_reduction("mse_loss", reduction)
    same_shape("mse_loss", pred, target, "pred", "target")
    return F.mse_loss(pred, target, reduction=reduction)


def l1_loss(pred: torch.Tensor, target: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Mean absolute error ``|pred − target|``. ``pred, target: (*)`` of equal shape."""
    check_reduction("l1_loss", reduction)
    same_shape("l1_loss", pred, target, "pred", "target")
    return F.l1_loss(pred, target, reduction=reduction)


def smooth_l1_loss(
    pred: torch.Tensor, target: torch.Tensor, beta: float = 1.0, reduction: str = "mean"
) -> torch.Tensor:
    """Huber-like loss: ``0.5·d²/β`` where ``|d| < β``, else ``|d| − 0.5·β``; ``d = pred − target``.

    ``beta`` must be > 0 (torch accepts 0 and silently becomes L1; use :func:`l1_loss` for that).
    """
    check_reduction("smooth_l1_loss", reduction)
    positive("smooth_l1_loss", "beta", beta)
    same_shape("smooth_l1_loss", pred, target, "pred", "target")
    return F.smooth_l1_loss(pred, target, reduction=reduction, beta=beta)


def poisson_nll_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    log_input: bool = True,
    full: bool = False,
    eps: float = 1e-8,
    reduction: str = "mean",
) -> torch.Tensor:
    """Poisson negative log-likelihood; ``target ~ Poisson(λ)``.

    With ``log_input`` (default) ``input`` is ``log λ`` and the loss is
    ``exp(input) − target·input``; otherwise ``input`` is ``λ`` and the loss is
    ``λ − target·log(λ + eps)``. ``full`` adds the Stirling term.
    ``input, target: (*)`` of equal shape.
    """
    check_reduction("poisson_nll_loss", reduction)
    non_negative("poisson_nll_loss", "eps", eps)
    same_shape("poisson_nll_loss", input, target, "input", "target")
    return F.poisson_nll_loss(
        input, target, log_input=log_input, full=full, eps=eps, reduction=reduction
    )
