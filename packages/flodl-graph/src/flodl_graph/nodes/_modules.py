"""Small modules that graphs commonly need: the recurrent state cell and a reshape."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from flodl_core import ConfigError


class StateAdd(nn.Module):
    """Identity on ``forward``; ``forward_named`` adds every ref to the input.

    The canonical recurrent cell: ``.through(StateAdd()).using(["memory"]).tag("memory")`` makes
    ``memory_t = x_t + memory_{t-1}`` (zeros on the first call).
    """

    def forward(self, x: Tensor) -> Tensor:
        return x

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        for r in refs.values():
            x = x + r
        return x


class Reshape(nn.Module):
    """``x.reshape(shape)``; one entry may be ``-1``. ``Reshape(-1, 4, 4)`` keeps the batch."""

    def __init__(self, *shape: int | tuple[int, ...] | list[int]) -> None:
        super().__init__()
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        if not shape or not all(isinstance(s, int) and (s > 0 or s == -1) for s in shape):
            raise ConfigError(
                f"Reshape: expected positive ints (at most one -1) as the shape, got {shape!r}"
            )
        if sum(s == -1 for s in shape) > 1:
            raise ConfigError(f"Reshape: at most one -1 is allowed, got {shape!r}")
        self.shape: tuple[int, ...] = tuple(int(s) for s in shape)  # type: ignore[arg-type]

    def forward(self, x: Tensor) -> Tensor:
        return x.reshape(self.shape)

    def extra_repr(self) -> str:
        return ", ".join(str(s) for s in self.shape)
