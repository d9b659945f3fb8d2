"""Gradient clipping by global norm or by value."""

from __future__ import annotations

import math

import torch

from .._checks import check_finite
from .._errors import ConfigError
from ._params import ParamsLike, tensors


def clip_grad_norm(
    params: ParamsLike,
    max_norm: float,
    norm_type: float = 2.0,
    *,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """Scale all gradients together so their global ``norm_type``-norm is at most ``max_norm``.

    Returns the total norm *before* clipping as a 0-dim tensor on the gradients' device: read
    it with ``float(...)`` only when needed, since that waits for the device. Parameters without
    a gradient are skipped. ``params``: a module, Parameters or named pairs. Same result as
    ``torch.nn.utils.clip_grad_norm_`` (which this calls: foreach kernels where the device has
    them, so a few kernels for the whole model instead of two per parameter).
    """
    max_norm = check_finite(max_norm, "max_norm", ge=0, where="clip_grad_norm")
    norm_type = float(norm_type)
    if not norm_type > 0:
        raise ConfigError(f"clip_grad_norm: norm_type must be > 0 or inf, got {norm_type}")
    return torch.nn.utils.clip_grad_norm_(
        tensors(params, "clip_grad_norm"),
        max_norm,
        norm_type,
        error_if_nonfinite=error_if_nonfinite,
        foreach=foreach,
    )


def clip_grad_value(
    params: ParamsLike, clip_value: float, *, foreach: bool | None = None
) -> torch.Tensor:
    """Clamp every gradient element into ``[−clip_value, clip_value]``.

    Returns the largest absolute gradient element *before* clipping (a 0-dim tensor; 0 when
    no parameter has a gradient), as floDl (Rust) did; torch's ``clip_grad_value_`` returns
    nothing. Parameters without a gradient are skipped.
    """
    clip_value = check_finite(clip_value, "clip_value", ge=0, where="clip_grad_value")
    ps = tensors(params, "clip_grad_value")
    grads = [p.grad for p in ps if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    peak = torch.nn.utils.get_total_norm(grads, math.inf, foreach=foreach)
    torch.nn.utils.clip_grad_value_(ps, clip_value, foreach=foreach)
    return peak
