"""Mixed precision: torch's autocast and GradScaler, and casting a model's parameters."""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn
from torch.amp import GradScaler as GradScaler
from torch.amp import autocast as autocast

from .._errors import ConfigError
from ._params import ParamsLike, tensors

P = TypeVar("P", bound=ParamsLike)


def cast_parameters(module_or_params: P, dtype: torch.dtype) -> P:
    """Cast floating-point parameters (and, for a module, floating buffers) to ``dtype`` in place.

    Returns its argument. A module goes through ``module.to(dtype)`` so batch-norm running
    statistics follow; for loose parameters each ``.data`` (and existing ``.grad``) is replaced.
    Integer tensors are left alone. Cast before building the optimizer: optimizer state made
    for the old dtype is not converted.
    """
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ConfigError(f"cast_parameters: dtype must be a floating torch.dtype, got {dtype!r}")
    if isinstance(module_or_params, nn.Module):
        module_or_params.to(dtype=dtype)
        return module_or_params
    with torch.no_grad():
        for p in tensors(module_or_params, "cast_parameters"):
            if not p.is_floating_point() or p.dtype == dtype:
                continue
            p.data = p.data.to(dtype)
            if p.grad is not None:
                p.grad = p.grad.to(dtype)
    return module_or_params
