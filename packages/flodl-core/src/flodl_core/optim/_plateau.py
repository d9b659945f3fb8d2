"""Reduce the lr when a watched metric stops improving."""

from __future__ import annotations

import math
from typing import Any

from .._checks import check_finite
from .._errors import ConfigError
from ._scheduler import Scheduler, check_count, check_non_negative, check_positive

# torch's ReduceLROnPlateau ignores reductions smaller than this, so do we (parity).
_EPS = 1e-8


class Plateau(Scheduler):
    """Multiply the lr by ``factor`` when ``observe``-d metrics stop improving.

    An observation improves when it is strictly better than the best so far (``mode="min"``:
    lower is better), relative to ``threshold`` (``best·(1 − threshold)``, default 0). After
    more than ``patience`` non-improving observations in a row the lr becomes
    ``max(lr·factor, min_lr)``, the count restarts, and ``cooldown`` further observations are
    ignored. This is torch's ``ReduceLROnPlateau`` (rel threshold mode) exactly; note that the
    original counted ``patience`` itself as enough (its ``patience=p`` is ``patience=p-1`` here).

    ``lr(step)`` ignores ``step`` and returns the current lr, so a Plateau composes with step
    schedules in :class:`MinOf`.
    """

    def __init__(
        self,
        base_lr: float,
        patience: int = 10,
        factor: float = 0.1,
        min_lr: float = 0.0,
        mode: str = "min",
        threshold: float = 0.0,
        cooldown: int = 0,
    ) -> None:
        self.base_lr = check_positive("Plateau", "base_lr", base_lr)
        self.patience = check_count("Plateau", "patience", patience, 0)
        self.factor = check_finite(
            factor, "factor", gt=0, lt=1, where="Plateau", expected="in (0, 1)"
        )
        self.min_lr = check_non_negative("Plateau", "min_lr", min_lr)
        if self.min_lr > self.base_lr:
            # The first reduction would be clamped back above the current lr: it never moves.
            raise ConfigError(
                f"Plateau: min_lr {min_lr} is above base_lr {base_lr}; the lr is reduced from "
                "base_lr down to min_lr"
            )
        if mode not in ("min", "max"):
            raise ConfigError(f"Plateau: mode={mode!r}; expected 'min' or 'max'")
        self.mode = mode
        self.threshold = check_non_negative("Plateau", "threshold", threshold)
        self.cooldown = check_count("Plateau", "cooldown", cooldown, 0)
        self.reset()

    def reset(self) -> None:
        """Back to ``base_lr`` with no history."""
        self.current_lr = self.base_lr
        self.best = math.inf if self.mode == "min" else -math.inf
        self.num_bad = 0
        self.cooldown_left = 0

    def _improves(self, metric: float) -> bool:
        if self.mode == "min":
            return metric < self.best * (1.0 - self.threshold)
        return metric > self.best * (1.0 + self.threshold)

    def observe(self, metric: float) -> float:
        """Record one observation of the watched metric; returns the (possibly reduced) lr.

        A NaN metric never improves (it counts as a bad observation, as in torch).
        """
        value = float(metric)
        if self._improves(value):
            self.best = value
            self.num_bad = 0
        else:
            self.num_bad += 1
        if self.cooldown_left > 0:
            self.cooldown_left -= 1
            self.num_bad = 0
        if self.num_bad > self.patience:
            reduced = max(self.current_lr * self.factor, self.min_lr)
            if self.current_lr - reduced > _EPS:
                self.current_lr = reduced
            self.cooldown_left = self.cooldown
            self.num_bad = 0
        return self.current_lr

    def lr(self, step: int | None = None) -> float:
        """The current lr (``step`` is accepted for the Scheduler protocol and ignored)."""
        return self.current_lr

    @property
    def peak_lr(self) -> float:
        return self.base_lr

    def apply(self, optimizer: Any, step: int | None = None) -> float:  # type: ignore[override]
        """Scale every group of ``optimizer`` by ``lr / base_lr``; see :meth:`Scheduler.apply`."""
        return super().apply(optimizer, 0)

    def state_dict(self) -> dict[str, float | int]:
        """What changes between observations (for resuming a run)."""
        return {
            "current_lr": self.current_lr,
            "best": self.best,
            "num_bad": self.num_bad,
            "cooldown_left": self.cooldown_left,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = {"current_lr", "best", "num_bad", "cooldown_left"} - set(state)
        if missing:
            raise ConfigError(f"Plateau.load_state_dict: missing keys {sorted(missing)}")
        self.current_lr = float(state["current_lr"])
        self.best = float(state["best"])
        self.num_bad = int(state["num_bad"])
        self.cooldown_left = int(state["cooldown_left"])

    def __repr__(self) -> str:
        return (
            f"Plateau(base_lr={self.base_lr}, patience={self.patience}, factor={self.factor}, "
            f"min_lr={self.min_lr}, mode={self.mode!r}, lr={self.current_lr})"
        )
