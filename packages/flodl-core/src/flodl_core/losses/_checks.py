"""Argument checks shared by the loss functions: cheap (shape metadata only, no device sync)."""

from __future__ import annotations

import torch

from .._checks import check_finite
from .._errors import ConfigError, ShapeError, format_choices

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(loss: str, reduction: str, allowed: tuple[str, ...] = REDUCTIONS) -> None:
    if reduction not in allowed:
        choices = format_choices(map(repr, allowed), sort=False)
        raise ConfigError(f"{loss}: reduction={reduction!r}; expected one of {choices}")


def tensor_arg(loss: str, t: object, name: str) -> None:
    """A TypeError naming ``name`` unless ``t`` is a tensor.

    The shape checks below read ``.shape`` first, so without this a list or a float would fail
    with an AttributeError about internals before torch could say what is wrong.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(
            f"{loss}: {name} must be a torch.Tensor, got {type(t).__name__}; "
            "convert it with torch.as_tensor"
        )


def same_shape(loss: str, a: torch.Tensor, b: torch.Tensor, a_name: str, b_name: str) -> None:
    tensor_arg(loss, a, a_name)
    tensor_arg(loss, b, b_name)
    # torch would broadcast (N, 1) against (N,) into (N, N) with only a warning: the most
    # common silent bug in regression code. Demand equal shapes instead.
    if a.shape != b.shape:
        raise ShapeError(
            f"{loss}: {b_name} has shape {tuple(b.shape)}, expected the shape of {a_name} "
            f"{tuple(a.shape)}"
        )


def min_rank(loss: str, t: torch.Tensor, name: str, rank: int, layout: str) -> None:
    tensor_arg(loss, t, name)
    if t.dim() < rank:
        raise ShapeError(f"{loss}: {name} must be {layout}, got shape {tuple(t.shape)}")


def exact_rank(loss: str, t: torch.Tensor, name: str, rank: int, layout: str) -> None:
    tensor_arg(loss, t, name)
    if t.dim() != rank:
        raise ShapeError(f"{loss}: {name} must be {layout}, got shape {tuple(t.shape)}")


def positive(loss: str, name: str, value: float) -> None:
    check_finite(value, name, gt=0, where=loss)


def non_negative(loss: str, name: str, value: float) -> None:
    check_finite(value, name, ge=0, where=loss)


def class_target(loss: str, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Validate a class-index target for ``logits: (N, C, *d)``; returns it as int64.

    ``target: (N, *d)`` of any integer dtype. Values are not range-checked here (that would
    cost a device sync); torch reports an out-of-range index itself.
    """
    min_rank(loss, logits, "input", 2, "(N, C) or (N, C, *d) scores")
    tensor_arg(loss, target, "target")
    expected = (logits.shape[0], *logits.shape[2:])
    if target.shape != expected:
        raise ShapeError(
            f"{loss}: class-index target has shape {tuple(target.shape)}, expected {expected} "
            f"for input of shape {tuple(logits.shape)}"
        )
    if target.dtype == torch.int64:
        return target
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        raise ShapeError(
            f"{loss}: class-index target must be an integer tensor, got {target.dtype}"
        )
    return target.long()
