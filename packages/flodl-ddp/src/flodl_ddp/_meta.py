"""The LR-aware meta-controller: from each averaging cycle's ``(lr, anchor, guard verdict, ElChe
phase)``, a factor for :meth:`ElChe.nudge_anchor_down` (or ``None``); in Probe nothing fires.

- **LR cliff**: the rate fell by more than 30 % since the previous cycle → base factor 0.5.
- **Verdict streak**: the last ``K`` verdicts were all ``SUPPRESS_GROWTH`` or ``NUDGE_DOWN``
  (``K`` = 5, 3, 2 and base 0.3, 0.5, 0.7 in Warmup, Stable, Mature); it empties the window.
- ``factor = clamp(base − (1 − base)·trend, 0.1, 0.95)`` with ``trend = (anchor − mean(last 5
  anchors)) / mean`` (a growing anchor is cut harder); both firing: the clamped product.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from flodl_core import ConfigError, check_finite, check_int

from ._elche import Phase
from ._errors import check_state_keys
from ._guards import ActionKind, ConvergenceAction

LR_WINDOW, ANCHOR_WINDOW, VERDICT_WINDOW = 3, 5, 5  # cycles each window keeps
LR_CLIFF, LR_CLIFF_BASE = 0.3, 0.5  # a fall of more than 30 % -> base factor 0.5
SETTLED_BAND = 0.10
STREAK = {Phase.WARMUP: (5, 0.3), Phase.STABLE: (3, 0.5), Phase.MATURE: (2, 0.7)}
"""Per phase: (verdicts in a row that fire, base factor)."""
FACTOR_RANGE = (0.1, 0.95)
_STATE = ("lrs", "anchors", "verdicts")  # the windows a checkpoint keeps


def _clamp(x: float) -> float:
    return min(max(x, FACTOR_RANGE[0]), FACTOR_RANGE[1])


class MetaController:
    """Anchor nudges from learning-rate cliffs and verdict streaks (see the module docstring)."""

    def __init__(self) -> None:
        self.reset()

    @property
    def anchor_trend(self) -> float:
        """``(current − mean) / mean`` of the last 5 anchors, current included (0 below two)."""
        if len(self._anchors) < 2:
            return 0.0
        mean = sum(self._anchors) / len(self._anchors)
        return (self._anchors[-1] - mean) / mean

    @property
    def settled(self) -> bool:
        """The anchor moved less than 10 % against its recent mean."""
        return abs(self.anchor_trend) < SETTLED_BAND

    def observe(
        self, lr: float, anchor: int, action: ConvergenceAction, phase: Phase
    ) -> float | None:
        """Record one averaging cycle; return a nudge factor in [0.1, 0.95] or ``None``."""
        lr, anchor = check_finite(lr, "lr"), check_int(anchor, "anchor", ge=1)
        if not isinstance(action, ConvergenceAction):
            raise ConfigError(f"action must be a ConvergenceAction, got {action!r}")
        phase = Phase(phase)
        self._lrs.append(lr)
        self._anchors.append(anchor)
        self._verdicts.append(action.kind is not ActionKind.STABLE)
        trend = self.anchor_trend
        self._last = {"anchor_trend": trend}
        if phase is Phase.PROBE:
            return None
        factors = []
        prev, now = self._lrs[-2] if len(self._lrs) >= 2 else 0.0, self._lrs[-1]
        if prev > 0 and (prev - now) / prev > LR_CLIFF:
            factors.append(_clamp(LR_CLIFF_BASE - (1 - LR_CLIFF_BASE) * trend))
            self._last["lr_cliff"] = 1.0
        k, base = STREAK[phase]
        recent = list(self._verdicts)[-k:]
        if len(recent) == k and all(recent):
            factors.append(_clamp(base - (1 - base) * trend))
            self._verdicts.clear()
            self._last["verdict_streak"] = 1.0
        if factors:
            self._last["factor"] = _clamp(math.prod(factors))
        return self._last.get("factor")

    def telemetry(self) -> dict[str, float]:
        """The last cycle's trend, which watchers fired and the factor returned."""
        return dict(self._last)

    def reset(self) -> None:
        self.load_state_dict(dict.fromkeys(_STATE, ()))
        self._last: dict[str, float] = {}

    def state_dict(self) -> dict[str, Any]:
        return {key: list(getattr(self, f"_{key}")) for key in _STATE}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys("MetaController", state, _STATE)
        self._lrs = deque(map(float, state["lrs"]), maxlen=LR_WINDOW)
        self._anchors = deque(map(int, state["anchors"]), maxlen=ANCHOR_WINDOW)
        self._verdicts = deque(map(bool, state["verdicts"]), maxlen=VERDICT_WINDOW)
