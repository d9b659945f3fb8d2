"""The runtime's side of the convergence guard and the meta-controller.

At each averaging the ranks' divergences ``‖θ_pre − θ_post‖ / ‖θ_post‖`` (all-gathered, so
identical everywhere) go to the guard; its verdict decides whether ElChe may grow the anchor
(``SuppressGrowth`` holds it) or must shrink it (``NudgeDown``). The guard is the one configured
(``TrendGuard(divergence_threshold)`` by default, ``NoGuard`` with ``no_divergence_guard``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._config import TrainerConfig


@dataclass(frozen=True)
class GuardStep:
    """One verdict, in the terms the runtime acts on."""

    action: Any  # the guard's own ConvergenceAction, passed on to the meta-controller
    name: str  # "stable", "suppress_growth" or "nudge_down"
    nudge: float | None  # NudgeDown's factor

    @property
    def stable(self) -> bool:
        return self.name == "stable"

    @property
    def allow_growth(self) -> bool:
        return self.name == "stable"


def classify(action: Any) -> tuple[str, float | None]:
    """``(name, factor)`` of a :class:`ConvergenceAction`."""
    kind = getattr(action, "kind", None)
    if kind is None:
        kind = getattr(action, "name", action)
    kind = str(getattr(kind, "name", kind)).upper()
    if "NUDGE" in kind:
        factor = getattr(action, "factor", None)
        return "nudge_down", float(factor) if factor is not None else 0.5
    if "SUPPRESS" in kind:
        return "suppress_growth", None
    return "stable", None


class GuardRunner:
    """Wraps a guard object: divergences in, :class:`GuardStep` out."""

    def __init__(self, guard: Any) -> None:
        self.guard = guard

    def report(self, per_rank: list[float], k: int) -> GuardStep:
        from ._guards import DivergenceReport

        action = self.guard.report(DivergenceReport(per_rank=list(per_rank)), k, k)
        name, factor = classify(action)
        return GuardStep(action, name, factor)

    def telemetry(self) -> dict[str, float]:
        fn = getattr(self.guard, "telemetry", None)
        return dict(fn()) if callable(fn) else {}

    def state_dict(self) -> dict[str, Any]:
        fn = getattr(self.guard, "state_dict", None)
        return fn() if callable(fn) else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        fn = getattr(self.guard, "load_state_dict", None)
        if callable(fn):
            fn(state)


def make_guard(cfg: TrainerConfig) -> GuardRunner:
    """The configured guard: ``cfg.guard``, else ``TrendGuard(cfg.divergence_threshold)``."""
    if cfg.guard is not None:
        return GuardRunner(cfg.guard)
    from ._guards import TrendGuard

    return GuardRunner(TrendGuard(cfg.divergence_threshold))


def make_meta(cfg: TrainerConfig) -> Any:
    """A :class:`MetaController` when ``meta_controller`` is on, else ``None``."""
    if not cfg.meta_controller:
        return None
    from ._meta import MetaController

    return MetaController()
