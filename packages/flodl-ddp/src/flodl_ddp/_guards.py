"""Convergence guards: watch how far the replicas drift apart, and hold the cadence back.

At each averaging every rank measures its divergence ``‖θ_pre − θ_post‖ / ‖θ_post‖``; the guard
sees ``D_t = max_r`` of it and answers with a :class:`ConvergenceAction`: ``STABLE``,
``SUPPRESS_GROWTH`` (do not grow the anchor or the async overshoot this time) or
``NUDGE_DOWN(factor)`` (:meth:`ElChe.nudge_anchor_down`). :class:`NoGuard` never acts,
:class:`TrendGuard` (the default) holds growth on a rising trend, :class:`MsfGuard` watches the
divergence's growth rate (a finite-time Lyapunov-exponent view of replica drift).
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from flodl_core import ConfigError, check_finite, check_int

from ._errors import check_state_keys


def _fraction(value: object, name: str) -> float:
    return check_finite(value, name, gt=0, le=1, expected="in (0, 1]")


class ActionKind(enum.Enum):
    STABLE = "stable"
    SUPPRESS_GROWTH = "suppress_growth"
    NUDGE_DOWN = "nudge_down"


@dataclass(frozen=True)
class ConvergenceAction:
    """A guard's verdict (``factor`` for ``NUDGE_DOWN`` only): ``ConvergenceAction.STABLE``,
    ``ConvergenceAction.SUPPRESS_GROWTH`` or ``ConvergenceAction.nudge_down(factor)``."""

    kind: ActionKind
    factor: float | None = None

    STABLE: ClassVar[ConvergenceAction]
    SUPPRESS_GROWTH: ClassVar[ConvergenceAction]

    @classmethod
    def nudge_down(cls, factor: float) -> ConvergenceAction:
        return cls(ActionKind.NUDGE_DOWN, _fraction(factor, "nudge factor"))

    @property
    def allows_growth(self) -> bool:
        """Whether the anchor (and async overshoot) may grow after this verdict."""
        return self.kind is ActionKind.STABLE

    def __str__(self) -> str:
        nudge = self.kind is ActionKind.NUDGE_DOWN
        return f"NUDGE_DOWN({self.factor:g})" if nudge else self.kind.name


ConvergenceAction.STABLE = ConvergenceAction(ActionKind.STABLE)
ConvergenceAction.SUPPRESS_GROWTH = ConvergenceAction(ActionKind.SUPPRESS_GROWTH)


@dataclass(frozen=True)
class DivergenceReport:
    """Per-rank divergences ``‖θ_pre − θ_post‖ / ‖θ_post‖`` measured at one averaging."""

    per_rank: Sequence[float]

    def __post_init__(self) -> None:
        vals = list(self.per_rank)
        if not vals:
            raise ConfigError("DivergenceReport needs one divergence per rank, got none")
        for r, v in enumerate(vals):
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"divergence of rank {r} is {v!r}; expected a number >= 0")
        object.__setattr__(self, "per_rank", [float(v) for v in vals])

    @property
    def max(self) -> float:
        """``D_t``: the largest divergence over the ranks (NaN if any is NaN)."""
        return math.nan if any(map(math.isnan, self.per_rank)) else max(self.per_rank)


@runtime_checkable
class ConvergenceGuard(Protocol):
    """What the runtime calls at each averaging; write your own to plug in a new rule
    (subclass it to inherit the stateless defaults of everything but :meth:`report`)."""

    def report(self, report: DivergenceReport, k_used: int, k_max: int) -> ConvergenceAction:
        """The verdict for this averaging. ``k_used``: steps the slowest rank ran since the last
        averaging; ``k_max``: the most steps any rank ran."""

    def telemetry(self) -> dict[str, float]:
        """Numbers worth plotting (timeline, monitor)."""
        return {}

    def reset(self) -> None:
        """Forget everything (e.g. after the weights were replaced)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class NoGuard(ConvergenceGuard):
    """Always ``STABLE``: the anchor grows whenever the overhead asks for it."""

    def report(self, report: DivergenceReport, k_used: int, k_max: int) -> ConvergenceAction:
        return ConvergenceAction.STABLE

    def __repr__(self) -> str:
        return "NoGuard()"


class TrendGuard(ConvergenceGuard):
    """``SUPPRESS_GROWTH`` when the last three ``D`` are strictly increasing and the last exceeds
    ``threshold``; ``STABLE`` otherwise (also before three values were seen). Keeps a ring of
    the last ``WINDOW`` (5) ``D`` values. Never nudges the anchor down."""

    WINDOW: ClassVar[int] = 5

    def __init__(self, threshold: float = 0.05) -> None:
        self.threshold = check_finite(threshold, "threshold", ge=0)
        self._history: deque[float] = deque(maxlen=self.WINDOW)

    @property
    def history(self) -> list[float]:
        return list(self._history)

    def report(self, report: DivergenceReport, k_used: int, k_max: int) -> ConvergenceAction:
        self._history.append(report.max)
        last = list(self._history)[-3:]
        rising = len(last) == 3 and last[0] < last[1] < last[2] > self.threshold
        return ConvergenceAction.SUPPRESS_GROWTH if rising else ConvergenceAction.STABLE

    def telemetry(self) -> dict[str, float]:
        return {"d_history_last": self._history[-1]} if self._history else {}

    def reset(self) -> None:
        self._history.clear()

    def state_dict(self) -> dict[str, Any]:
        """The observed history (the threshold is configuration, set by the constructor)."""
        return {"history": list(self._history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys("TrendGuard", state, ["history"])
        self._history = deque(map(float, state["history"]), maxlen=self.WINDOW)

    def __repr__(self) -> str:
        return f"TrendGuard(threshold={self.threshold:g})"


class MsfGuard(ConvergenceGuard):
    """Divergence growth-rate guard.

    At each averaging with ``D_t > floor``, ``D_{t-1} > floor`` and ``k_max > 0``:

    - ``λ_raw = ln(D_t / D_{t-1}) / k_max`` (growth per step);
    - ``m_t = α·m_{t-1} + (1 − α)·λ_raw`` and ``λ_ema = m_t / (1 − α^t)`` (Adam's bias
      correction, Kingma & Ba 2015, so early estimates are not pulled toward 0);
    - ``λ_ema > suppress_threshold`` for ``suppress_streak`` consecutive estimates →
      ``SUPPRESS_GROWTH``; ``λ_ema > nudge_threshold`` for ``nudge_streak`` consecutive estimates
      → ``NUDGE_DOWN(nudge_factor)``. The two streaks count independently, the nudge wins when
      both fire, and a firing resets only its own streak.

    A ``D_t <= floor`` (the replicas agree to float precision) resets the estimator (``D_{t-1}``,
    the EMA and its step count, and both streaks). ``k_max == 0`` skips the estimate but keeps
    ``D_t`` as the next reference.

    Args:
        alpha: EMA decay, in (0, 1).
        suppress_threshold: the soft rule's threshold (above).
        suppress_streak: the soft rule's streak.
        nudge_threshold: the hard rule's threshold (``nudge=False``: no hard rule).
        nudge_streak: the hard rule's streak.
        nudge_factor: the hard rule's factor.
        floor: divergences at or below it count as zero.
    """

    def __init__(
        self,
        *,
        alpha: float = 0.9,
        suppress_threshold: float = 1e-3,
        suppress_streak: int = 3,
        nudge_threshold: float = 1e-2,
        nudge_streak: int = 3,
        nudge_factor: float = 0.5,
        nudge: bool = True,
        floor: float = 1e-8,
    ) -> None:
        self.alpha = check_finite(alpha, "alpha", gt=0, lt=1, expected="in (0, 1)")
        self.suppress_threshold = check_finite(suppress_threshold, "suppress_threshold")
        self.suppress_streak = check_int(suppress_streak, "suppress_streak", ge=1)
        self.nudge_threshold = check_finite(nudge_threshold, "nudge_threshold")
        self.nudge_streak = check_int(nudge_streak, "nudge_streak", ge=1)
        self.nudge_factor = _fraction(nudge_factor, "nudge_factor")
        self.nudge = bool(nudge)
        self.floor = check_finite(floor, "floor")
        self.reset()

    def reset(self) -> None:
        self.load_state_dict(self._FRESH)

    @property
    def lambda_ema(self) -> float | None:
        """The last bias-corrected rate estimate (``None`` before the first)."""
        return self._lambda_ema

    def report(self, report: DivergenceReport, k_used: int, k_max: int) -> ConvergenceAction:
        d = report.max
        if not math.isfinite(d) or d <= self.floor:
            self.reset()
            return ConvergenceAction.STABLE
        prev, self._prev = self._prev, d
        if prev is None or k_max <= 0:
            return ConvergenceAction.STABLE
        lam = math.log(d / prev) / k_max
        self._t += 1
        self._m = self.alpha * self._m + (1.0 - self.alpha) * lam
        ema = self._m / (1.0 - self.alpha**self._t)
        self._lambda_raw, self._lambda_ema = lam, ema
        self._soft = self._soft + 1 if ema > self.suppress_threshold else 0
        self._hard = self._hard + 1 if self.nudge and ema > self.nudge_threshold else 0
        if self.nudge and self._hard >= self.nudge_streak:
            self._hard = 0
            return ConvergenceAction.nudge_down(self.nudge_factor)
        if self._soft >= self.suppress_streak:
            self._soft = 0
            return ConvergenceAction.SUPPRESS_GROWTH
        return ConvergenceAction.STABLE

    def telemetry(self) -> dict[str, float]:
        out: dict[str, float] = {"suppress_streak": self._soft, "nudge_streak": self._hard}
        if self._lambda_raw is not None and self._lambda_ema is not None:
            out.update(lambda_raw=self._lambda_raw, lambda_ema=self._lambda_ema)
        return out

    _FRESH: ClassVar[dict[str, Any]] = dict(  # the estimator's state, as reset() leaves it
        prev=None, m=0.0, t=0, lambda_raw=None, lambda_ema=None, soft=0, hard=0
    )

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, f"_{key}") for key in self._FRESH}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys("MsfGuard", state, self._FRESH)
        for key in self._FRESH:
            setattr(self, f"_{key}", state[key])

    def __repr__(self) -> str:
        hard = "off"
        if self.nudge:
            hard = f"({self.nudge_threshold:g}, {self.nudge_streak}, {self.nudge_factor:g})"
        soft = f"({self.suppress_threshold:g}, {self.suppress_streak})"
        return f"MsfGuard(alpha={self.alpha:g}, suppress={soft}, nudge={hard})"
