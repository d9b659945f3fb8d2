"""Halting conditions for ``while_cond`` / ``until_cond`` loops (halt iff element 0 > 0)."""

from __future__ import annotations

from torch import Tensor, nn

from flodl_core import check_finite, check_int


class ThresholdHalt(nn.Module):
    """Halt once ``max(state) > threshold``: returns ``[max(state) - threshold]``."""

    def __init__(self, threshold: float) -> None:
        super().__init__()
        self.threshold = check_finite(threshold, "threshold", where="ThresholdHalt")

    def forward(self, state: Tensor) -> Tensor:
        return (state.max() - self.threshold).reshape(1)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}"


class LearnedHalt(nn.Module):
    """A learned halting score ``Linear(dim, 1)``: state (B, dim) -> (B, 1).

    Only element 0 decides (for a batch, the first sample's score); the decision is read to the
    host, so no gradient flows through it.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        check_int(dim, "dim", gt=0, where="LearnedHalt", expected="a positive int")
        self.proj = nn.Linear(dim, 1)

    def forward(self, state: Tensor) -> Tensor:
        return self.proj(state)
