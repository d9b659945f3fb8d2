"""What every benchmark model provides: two builders (flodl graph, hand-written module) that
draw the same initial weights, the data, and the loss."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn


@dataclass(frozen=True)
class Bench:
    """One benchmark model, written twice.

    ``flodl()`` and ``hand()`` create their layers in the same order, so under the same seed
    they start from identical weights; ``data(batch)`` returns ``(input, target)``.
    """

    name: str
    spec: str
    flodl: Callable[[], nn.Module]
    hand: Callable[[], nn.Module]
    data: Callable[[int], tuple[Tensor, Tensor]]
    batch: int
    loss: Callable[[Tensor, Tensor], Tensor] = F.mse_loss
    compile_ok: bool = True

    def make(self, side: str, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return self.flodl() if side == "flodl" else self.hand()


def randn(*shape: int, seed: int = 1) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class LastStep(nn.Module):
    """The last time step of a fused RNN's output: ((B, T, H), state) -> (B, H)."""

    def forward(self, out: tuple[Tensor, object]) -> Tensor:
        return out[0][:, -1]


def block(d: int) -> nn.Sequential:
    """Linear -> GELU -> LayerNorm, the unit of the residual and loop models."""
    return nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))


def spec_of(doc: str | None) -> str:
    """The sizes line of a model module's docstring: its first paragraph after ``name: ``."""
    first = " ".join((doc or "").split("\n\n")[0].split())
    return first.split(": ", 1)[1] if ": " in first else first
