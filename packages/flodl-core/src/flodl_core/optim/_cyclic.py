"""Schedules that rise and fall: one-cycle and cyclic (Smith, 2017/2018)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._checks import check_finite
from .._errors import ConfigError, format_choices
from ._scheduler import Scheduler, check_count, check_positive, check_step

_SHAPES = ("linear", "cos")
_CYCLIC_MODES = ("triangular", "triangular2", "exp_range")


def _interpolate(shape: str, start: float, end: float, pct: float) -> float:
    if shape == "cos":
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1.0)
    return start + (end - start) * pct


@dataclass(frozen=True)
class OneCycle(Scheduler):
    """One-cycle policy: ``max_lr/div_factor`` up to ``max_lr``, then down to
    ``max_lr/(div_factor·final_div_factor)``.

    The rise spans the first ``warmup_frac·total`` steps and peaks at step
    ``warmup_frac·total − 1``; the fall ends at step ``total − 1`` and holds after. Defaults
    follow floDl (Rust) (linear rise, cosine fall, final lr = max_lr/25). With
    ``warmup="cos", final_div_factor=1e4`` this is exactly torch's ``OneCycleLR`` (lr part).
    """

    max_lr: float
    total: int
    warmup_frac: float = 0.3
    div_factor: float = 25.0
    final_div_factor: float = 1.0
    warmup: str = "linear"
    anneal: str = "cos"

    def __post_init__(self) -> None:
        check_positive("OneCycle", "max_lr", self.max_lr)
        check_count("OneCycle", "total", self.total, 2)
        check_positive("OneCycle", "div_factor", self.div_factor)
        check_positive("OneCycle", "final_div_factor", self.final_div_factor)
        for name in ("warmup", "anneal"):
            if getattr(self, name) not in _SHAPES:
                raise ConfigError(
                    f"OneCycle: {name}={getattr(self, name)!r}; expected 'linear' or 'cos'"
                )
        check_finite(self.warmup_frac, "warmup_frac", where="OneCycle")  # its range: below
        rise = self.warmup_frac * self.total
        if not 1.0 < rise < self.total:
            raise ConfigError(
                f"OneCycle: warmup_frac {self.warmup_frac} x total {self.total} = {rise:g} "
                "rising steps; need more than 1 and fewer than total"
            )

    def lr(self, step: int) -> float:
        s = min(check_step(step, "OneCycle"), self.total - 1)
        start = self.max_lr / self.div_factor
        peak_step = self.warmup_frac * self.total - 1.0
        if s <= peak_step:
            return _interpolate(self.warmup, start, self.max_lr, s / peak_step)
        end = start / self.final_div_factor
        pct = (s - peak_step) / (self.total - 1.0 - peak_step)
        return _interpolate(self.anneal, self.max_lr, end, pct)

    @property
    def peak_lr(self) -> float:
        return self.max_lr


@dataclass(frozen=True)
class Cyclic(Scheduler):
    """Cyclical lr between ``base_lr`` and ``max_lr`` (Smith, 2017; torch's ``CyclicLR``).

    Each cycle rises linearly for ``step_size`` steps and falls for ``step_size_down`` (default
    the same). ``mode``: ``"triangular"`` (constant amplitude), ``"triangular2"`` (amplitude
    halved every cycle) or ``"exp_range"`` (amplitude scaled by ``gamma^step``).
    """

    base_lr: float
    max_lr: float
    step_size: int
    step_size_down: int | None = None
    mode: str = "triangular"
    gamma: float = 1.0

    def __post_init__(self) -> None:
        check_positive("Cyclic", "base_lr", self.base_lr)
        check_positive("Cyclic", "max_lr", self.max_lr)
        if self.max_lr < self.base_lr:
            raise ConfigError(f"Cyclic: max_lr {self.max_lr} is below base_lr {self.base_lr}")
        check_count("Cyclic", "step_size", self.step_size)
        if self.step_size_down is not None:
            check_count("Cyclic", "step_size_down", self.step_size_down)
        if self.mode not in _CYCLIC_MODES:
            choices = format_choices(_CYCLIC_MODES, sort=False)
            raise ConfigError(f"Cyclic: mode={self.mode!r}; expected one of {choices}")
        check_positive("Cyclic", "gamma", self.gamma)

    @classmethod
    def asymmetric(cls, base_lr: float, max_lr: float, up: int, down: int) -> Cyclic:
        """Triangular cycles with ``up`` rising and ``down`` falling steps."""
        return cls(base_lr, max_lr, up, down)

    def lr(self, step: int) -> float:
        s = check_step(step, "Cyclic")
        up = self.step_size
        period = up + (self.step_size_down if self.step_size_down is not None else up)
        cycle = s // period
        pos = s - cycle * period
        # Rising: pos/up; falling: 1 at the top down to 0 at the end of the period.
        height = pos / up if pos <= up else (period - pos) / (period - up)
        if self.mode == "triangular2":
            height /= 2.0**cycle
        elif self.mode == "exp_range":
            height *= self.gamma**s
        return self.base_lr + (self.max_lr - self.base_lr) * height

    @property
    def peak_lr(self) -> float:
        return self.max_lr
