"""Connectionist temporal classification (Graves et al., 2006)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.nn import functional as F

from .._errors import ConfigError, ShapeError
from ._checks import check_reduction, exact_rank, tensor_arg


def _lengths(name: str, lengths: torch.Tensor | Sequence[int], batch: int) -> torch.Tensor:
    t = lengths if isinstance(lengths, torch.Tensor) else torch.as_tensor(lengths, dtype=torch.long)
    if t.shape != (batch,):
        raise ShapeError(
            f"ctc_loss: {name} has shape {tuple(t.shape)}, expected ({batch},): one per sequence"
        )
    return t


def ctc_loss(
    log_probs: torch.Tensor,
    targets: torch.Tensor,
    input_lengths: torch.Tensor | Sequence[int],
    target_lengths: torch.Tensor | Sequence[int],
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> torch.Tensor:
    """CTC loss of ``log_probs: (T, N, C)`` (log-softmax over C) against unaligned targets.

    ``targets`` is ``(N, S)`` padded or 1-D with all targets concatenated; ``input_lengths``
    and ``target_lengths`` hold one length per sequence. ``"mean"`` divides each sequence's
    loss by its target length, then averages over the batch (torch's convention).
    """
    check_reduction("ctc_loss", reduction)
    exact_rank("ctc_loss", log_probs, "log_probs", 3, "(T, N, C) log-probabilities")
    n, c = log_probs.shape[1], log_probs.shape[2]
    if not 0 <= blank < c:
        raise ConfigError(f"ctc_loss: blank={blank} is not a class index in [0, {c})")
    tensor_arg("ctc_loss", targets, "targets")
    if targets.dim() not in (1, 2) or (targets.dim() == 2 and targets.shape[0] != n):
        raise ShapeError(
            f"ctc_loss: targets must be (N={n}, S) padded or 1-D concatenated, "
            f"got shape {tuple(targets.shape)}"
        )
    return F.ctc_loss(
        log_probs,
        targets,
        _lengths("input_lengths", input_lengths, n),
        _lengths("target_lengths", target_lengths, n),
        blank=blank,
        reduction=reduction,
        zero_infinity=zero_infinity,
    )
