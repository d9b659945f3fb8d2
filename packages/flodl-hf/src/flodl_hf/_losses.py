"""Fine-tuning losses, computed as transformers computes them for ``labels=``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from flodl_core import ConfigError, ShapeError


def sequence_classification_loss(
    logits: Tensor, labels: Tensor, problem_type: str | None = None
) -> Tensor:
    """``logits: (B, C)``. ``problem_type`` as in HF configs; when None it is inferred: one
    output -> regression (MSE), integer labels -> single-label (cross-entropy), float labels
    ``(B, C)`` -> multi-label (BCE with logits)."""
    c = logits.shape[-1]
    if problem_type is None:
        if c == 1:
            problem_type = "regression"
        elif labels.dtype in (torch.long, torch.int):
            problem_type = "single_label_classification"
        else:
            problem_type = "multi_label_classification"
    if problem_type == "regression":
        if c == 1:
            return F.mse_loss(logits.squeeze(), labels.squeeze().to(logits.dtype))
        return F.mse_loss(logits, labels.to(logits.dtype))
    if problem_type == "single_label_classification":
        if labels.numel() != logits.shape[0]:
            raise ShapeError(
                f"single-label classification needs one class index per row: labels "
                f"{tuple(labels.shape)} for logits {tuple(logits.shape)}"
            )
        return F.cross_entropy(logits.view(-1, c), labels.view(-1))
    if problem_type == "multi_label_classification":
        if labels.shape != logits.shape:
            raise ShapeError(
                f"multi-label classification needs labels shaped like the logits "
                f"{tuple(logits.shape)}, got {tuple(labels.shape)}"
            )
        return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
    raise ConfigError(
        f"unknown problem_type {problem_type!r}; expected regression, "
        "single_label_classification or multi_label_classification"
    )


def token_classification_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """``logits: (B, S, C)``, ``labels: (B, S)`` class indices, -100 ignored."""
    if labels.shape != logits.shape[:-1]:
        raise ShapeError(
            f"token labels must be {tuple(logits.shape[:-1])} (one per token), "
            f"got {tuple(labels.shape)}"
        )
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))


def masked_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """``logits: (B, S, V)``, ``labels: (B, S)`` token ids at masked positions, -100 elsewhere."""
    return token_classification_loss(logits, labels)


def question_answering_loss(
    start_logits: Tensor, end_logits: Tensor, start_positions: Tensor, end_positions: Tensor
) -> Tensor:
    """Mean of the start and end cross-entropies; ``*_logits: (B, S)``, positions ``(B,)``.

    Positions outside the sequence are clamped to ``S`` and ignored, as transformers does.
    """
    s = start_logits.shape[1]
    start = start_positions.reshape(-1).clamp(0, s)
    end = end_positions.reshape(-1).clamp(0, s)
    if start.numel() != start_logits.shape[0] or end.numel() != end_logits.shape[0]:
        raise ShapeError(
            f"question answering needs one start and one end position per row "
            f"({start_logits.shape[0]}), got {start_positions.numel()} and {end_positions.numel()}"
        )
    return (
        F.cross_entropy(start_logits, start, ignore_index=s)
        + F.cross_entropy(end_logits, end, ignore_index=s)
    ) / 2
