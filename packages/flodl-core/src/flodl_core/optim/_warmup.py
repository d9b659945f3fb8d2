"""Linear warmup in front of any schedule."""

from __future__ import annotations

from .._errors import ConfigError
from ._scheduler import Scheduler, check_count, check_positive, check_step


class Warmup(Scheduler):
    """``target·(step + 1)/warmup_steps`` for the first ``warmup_steps`` steps, then ``inner``.

    The inner clock restarts at 0 when warmup ends (``inner.lr(step − warmup_steps)``), so
    ``Warmup(Cosine(1e-3, total=900), 100)`` runs 1000 steps in all. The ramp never yields 0
    (the first step already trains at ``target/warmup_steps``). ``target`` defaults to
    ``inner.peak_lr``.
    """

    def __init__(self, inner: Scheduler, warmup_steps: int, target: float | None = None) -> None:
        if not isinstance(inner, Scheduler):
            raise ConfigError(f"Warmup: inner must be a Scheduler, got {type(inner).__name__}")
        self.inner = inner
        self.warmup_steps = check_count("Warmup", "warmup_steps", warmup_steps, 0)
        self.target = (
            inner.peak_lr if target is None else check_positive("Warmup", "target", target)
        )

    def lr(self, step: int) -> float:
        s = check_step(step, "Warmup")
        if s < self.warmup_steps:
            return self.target * (s + 1) / self.warmup_steps
        return self.inner.lr(s - self.warmup_steps)

    @property
    def peak_lr(self) -> float:
        return self.target

    def __repr__(self) -> str:
        return f"Warmup({self.inner!r}, warmup_steps={self.warmup_steps}, target={self.target})"
