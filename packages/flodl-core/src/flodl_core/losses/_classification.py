"""Classification losses over class scores, log-probabilities or probabilities."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from .._checks import check_finite
from .._errors import ConfigError, ShapeError
from ._checks import check_reduction, class_target, min_rank, same_shape, tensor_arg


def _check_weight(loss: str, weight: torch.Tensor | None, n_classes: int) -> None:
    if weight is None:
        return
    tensor_arg(loss, weight, "weight")
    if weight.shape != (n_classes,):
        raise ShapeError(
            f"{loss}: weight has shape {tuple(weight.shape)}, expected ({n_classes},), "
            "one per class"
        )


def cross_entropy_loss(
    input: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Softmax cross-entropy of unnormalised scores.

    ``input: (N, C)`` or ``(N, C, *d)``. ``target`` is either class indices ``(N, *d)`` of any
    integer dtype (``ignore_index`` entries skipped) or class probabilities of ``input``'s
    shape (float). ``weight: (C,)`` rescales classes. floDl (Rust) accepted 2-D input only and
    had no label smoothing; both are extensions here.
    """
    check_reduction("cross_entropy_loss", reduction)
    min_rank("cross_entropy_loss", input, "input", 2, "(N, C) or (N, C, *d) scores")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ConfigError(
            f"cross_entropy_loss: label_smoothing must be in [0, 1], got {label_smoothing!r}"
        )
    _check_weight("cross_entropy_loss", weight, input.shape[1])
    tensor_arg("cross_entropy_loss", target, "target")
    if target.is_floating_point():
        same_shape("cross_entropy_loss", input, target, "input", "probability target")
    else:
        target = class_target("cross_entropy_loss", input, target)
    return F.cross_entropy(
        input,
        target,
        weight=weight,
        ignore_index=ignore_index,
        reduction=reduction,
        label_smoothing=label_smoothing,
    )


#: PyTorch's name for :func:`cross_entropy_loss`.
cross_entropy = cross_entropy_loss


def nll_loss(
    log_probs: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> torch.Tensor:
    """Negative log-likelihood of ``log_probs: (N, C, *d)`` at class indices ``target: (N, *d)``."""
    check_reduction("nll_loss", reduction)
    target = class_target("nll_loss", log_probs, target)
    _check_weight("nll_loss", weight, log_probs.shape[1])
    return F.nll_loss(
        log_probs, target, weight=weight, ignore_index=ignore_index, reduction=reduction
    )


def bce_loss(
    probs: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Binary cross-entropy of probabilities ``probs ∈ [0, 1]`` against ``target`` (same shape).

    Prefer :func:`bce_with_logits_loss` on raw scores: it is numerically stable and is what
    autocast allows in float16.
    """
    check_reduction("bce_loss", reduction)
    same_shape("bce_loss", probs, target, "probs", "target")
    return F.binary_cross_entropy(probs, target, weight=weight, reduction=reduction)


def bce_with_logits_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor | None = None,
    pos_weight: torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """Sigmoid + binary cross-entropy in one stable op. ``logits, target: (*)`` of equal shape.

    ``pos_weight`` (broadcast over the last dim, e.g. ``(C,)``) weighs positive examples.
    """
    check_reduction("bce_with_logits_loss", reduction)
    same_shape("bce_with_logits_loss", logits, target, "logits", "target")
    return F.binary_cross_entropy_with_logits(
        logits, target, weight=weight, pos_weight=pos_weight, reduction=reduction
    )


def kl_div_loss(
    log_input: torch.Tensor,
    target: torch.Tensor,
    reduction: str = "batchmean",
    log_target: bool = False,
) -> torch.Tensor:
    """``KL(target ‖ input)`` with ``input`` given as log-probabilities.

    Default ``"batchmean"`` (sum / batch size) is the mathematically correct KL divergence and
    floDl (Rust)'s behaviour; torch's own default ``"mean"`` divides by every element instead
    (and warns). ``log_target=True`` takes ``target`` as log-probabilities too.
    """
    check_reduction("kl_div_loss", reduction, ("batchmean", "mean", "sum", "none"))
    same_shape("kl_div_loss", log_input, target, "log_input", "target")
    return F.kl_div(log_input, target, reduction=reduction, log_target=log_target)


def focal_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    alpha: float | torch.Tensor | None = 0.25,
    gamma: float = 2.0,
    reduction: str = "mean",
    ignore_index: int = -100,
) -> torch.Tensor:
    """Focal loss ``−α_t·(1 − p_t)^γ·log p_t`` (Lin et al., 2017, eq. 5).

    Two forms, chosen by ``target``:

    - class indices ``(N, *d)`` (integer) with ``logits: (N, C, *d)``: ``p_t`` is the softmax
      probability of the true class. ``alpha`` is a scalar, a per-class ``(C,)`` tensor or
      ``None`` (no weighting); ``ignore_index`` entries are skipped (and excluded from the mean).
    - binary targets of ``logits``' shape (float, in [0, 1]): ``p_t`` is the sigmoid probability
      of the target and ``α_t = α·t + (1 − α)·(1 − t)`` (the detection form, RetinaNet).

    ``gamma = 0`` and ``alpha = None`` reduce to cross-entropy.
    """
    check_reduction("focal_loss", reduction)
    check_finite(gamma, "gamma", ge=0, where="focal_loss")
    if isinstance(alpha, (int, float)) and not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"focal_loss: alpha must be in [0, 1], got {alpha!r}")
    tensor_arg("focal_loss", logits, "logits")
    tensor_arg("focal_loss", target, "target")
    if target.is_floating_point():
        return _binary_focal(logits, target, alpha, gamma, reduction)
    target = class_target("focal_loss", logits, target)
    if isinstance(alpha, torch.Tensor) and alpha.shape != (logits.shape[1],):
        raise ShapeError(
            f"focal_loss: alpha tensor has shape {tuple(alpha.shape)}, expected "
            f"({logits.shape[1]},): one per class"
        )
    keep = target != ignore_index
    safe = torch.where(keep, target, 0).unsqueeze(1)  # ignored entries gather class 0, masked below
    log_pt = F.log_softmax(logits, dim=1).gather(1, safe).squeeze(1)
    # 1 − p_t as −expm1(log p_t): exact where p_t is close to 1, the regime focal loss targets.
    loss = -(-torch.expm1(log_pt)).pow(gamma) * log_pt
    if isinstance(alpha, torch.Tensor):
        loss = loss * alpha.to(loss.dtype)[safe.squeeze(1)]
    elif alpha is not None:
        loss = loss * alpha
    loss = loss * keep
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / keep.sum()


def _binary_focal(
    logits: torch.Tensor,
    target: torch.Tensor,
    alpha: float | torch.Tensor | None,
    gamma: float,
    reduction: str,
) -> torch.Tensor:
    same_shape("focal_loss", logits, target, "logits", "binary target")
    ce = F.binary_cross_entropy_with_logits(logits, target, reduction="none")  # = −log p_t
    p = torch.sigmoid(logits)
    p_t = p * target + (1 - p) * (1 - target)
    loss = ce * (1 - p_t).pow(gamma)
    if alpha is not None:
        loss = loss * (alpha * target + (1 - alpha) * (1 - target))
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.mean()
