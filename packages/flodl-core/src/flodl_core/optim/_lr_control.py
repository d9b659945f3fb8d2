"""Learning-rate control shared by every flodl optimizer: set, scale and read group lrs."""

from __future__ import annotations

import operator
from typing import Any

import torch

from .._checks import check_finite
from .._errors import ConfigError


class GroupIndexError(ConfigError, IndexError):
    """A parameter-group index is out of range; the message gives the valid range."""


def check_lr(lr: float, where: str) -> float:
    """``lr`` as a float, or a ConfigError if it is not a finite number >= 0."""
    return check_finite(lr, "lr", ge=0, where=where)


def write_group_lr(group: dict[str, Any], lr: float) -> None:
    """Set a group's lr, in place when it is a tensor (captured CUDA graphs keep reading it)."""
    current = group["lr"]
    if isinstance(current, torch.Tensor):
        current.fill_(lr)
    else:
        group["lr"] = lr


def read_group_lr(group: dict[str, Any]) -> float:
    lr = group["lr"]
    return float(lr.item()) if isinstance(lr, torch.Tensor) else float(lr)


class LrControl:
    """Mixin for ``torch.optim.Optimizer`` subclasses: per-group lr helpers.

    ``set_lr`` overwrites every group (as in floDl (Rust)); to keep per-group ratios while
    following a schedule, use ``scale_lr`` or a scheduler's ``apply(optimizer, step)``.
    """

    param_groups: list[dict[str, Any]]

    def _group(self, index: int) -> dict[str, Any]:
        n = len(self.param_groups)
        try:
            i = operator.index(index)
        except TypeError:
            raise GroupIndexError(f"group index must be an int, got {index!r}") from None
        if isinstance(index, bool) or not 0 <= i < n:
            raise GroupIndexError(
                f"group index {index!r} is out of range: the optimizer has {n} parameter "
                f"group{'s' if n != 1 else ''} (valid: 0..{n - 1})"
            )
        return self.param_groups[i]

    def set_lr(self, lr: float) -> None:
        """Set the learning rate of every parameter group to ``lr``."""
        value = check_lr(lr, "set_lr")
        for group in self.param_groups:
            write_group_lr(group, value)

    def set_group_lr(self, index: int, lr: float) -> None:
        """Set the learning rate of parameter group ``index`` (0-based)."""
        group = self._group(index)
        write_group_lr(group, check_lr(lr, f"set_group_lr({index})"))

    def scale_lr(self, factor: float) -> None:
        """Multiply every group's learning rate by ``factor`` (ratios between groups kept)."""
        f = check_lr(factor, "scale_lr factor")
        for group in self.param_groups:
            write_group_lr(group, read_group_lr(group) * f)

    def lr(self) -> float:
        """Learning rate of group 0 (the only one for an optimizer built without groups)."""
        return read_group_lr(self._group(0))

    def group_lr(self, index: int) -> float:
        """Learning rate of parameter group ``index``."""
        return read_group_lr(self._group(index))

    def group_lrs(self) -> list[float]:
        """Learning rates of all groups, in group order."""
        return [read_group_lr(g) for g in self.param_groups]
