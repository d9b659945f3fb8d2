"""``Reshape``: a fixed target shape as a module, for use inside sequential or graph pipelines."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import torch
from torch import nn

from .._errors import ConfigError, ShapeError


class Reshape(nn.Module):
    """Reshape the whole input (batch dimension included) to ``shape``.

    One entry may be ``-1`` and is inferred, which is how a variable batch size is kept:
    ``Reshape((-1, 16, 4, 4))`` turns ``(B, 256)`` into ``(B, 16, 4, 4)``. For reshaping a
    single dimension, ``torch.nn.Unflatten`` is the torch idiom.
    """

    def __init__(self, shape: Sequence[int]) -> None:
        super().__init__()
        if isinstance(shape, int):
            shape = (shape,)
        try:
            dims = tuple(operator.index(d) for d in shape)
        except TypeError:
            raise ConfigError(f"Reshape: shape must be a sequence of ints, got {shape!r}") from None
        if any(d < -1 for d in dims):
            raise ConfigError(f"Reshape: shape {dims} has a dimension below -1")
        if dims.count(-1) > 1:
            raise ConfigError(
                f"Reshape: shape {dims} has more than one -1; at most one is inferred"
            )
        self.shape: tuple[int, ...] = dims

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (*)`` with ``x.numel()`` compatible with ``shape`` -> ``shape``."""
        try:
            return x.reshape(self.shape)
        except RuntimeError:
            raise ShapeError(
                f"Reshape{self.shape}: cannot reshape an input of shape {tuple(x.shape)} "
                f"({x.numel()} elements) to {self.shape}"
            ) from None

    def extra_repr(self) -> str:
        return f"shape={self.shape}"
