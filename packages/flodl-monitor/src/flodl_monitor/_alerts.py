"""Alerts: the few conditions worth interrupting a person for.

A loss that turned NaN or infinite, a loss that stopped improving, and a rank that stopped
reporting. Each alert is raised once per condition (``key``) so a NaN that persists for a hundred
epochs prints one line, not a hundred; a stall re-arms after the metric improves again, and that
improvement is itself reported (``recovered``, same metric name first) so the dashboard moves the
stall to its past alerts. The page also moves every alert to the past once the run is complete.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flodl_core import check_finite, check_int

from ._format import format_metric

ALERT_KINDS = ("nan_loss", "stalled", "rank_lost", "recovered")


@dataclass(frozen=True)
class Alert:
    """One alert. ``path`` is the record path it concerns; ``step`` the epoch/step, if any."""

    kind: str
    path: str
    message: str
    step: int | None = None
    t: float = field(default_factory=time.time)

    @property
    def key(self) -> tuple[str, str, str]:
        """What makes two alerts "the same" for de-duplication."""
        return (self.kind, self.path, self.message.split(" ", 1)[0])

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "message": self.message,
            "step": self.step,
            "t": round(self.t, 3),
        }


def is_loss_name(name: str) -> bool:
    """Metrics watched for NaN and stalls: those whose last dotted segment mentions ``loss``."""
    return "loss" in name.rsplit(".", 1)[-1].lower()


class LossWatch:
    """Raises ``nan_loss`` and ``stalled`` alerts from a stream of per-epoch metrics.

    A loss is stalled when it has not beaten its best by a relative ``min_delta`` for ``patience``
    consecutive epochs (``patience=0`` disables stall alerts).
    """

    def __init__(self, path: str, *, patience: int = 10, min_delta: float = 1e-4) -> None:
        self.path = path
        self.patience = check_int(patience, "stall patience", ge=0, note="0 disables")
        self.min_delta = check_finite(min_delta, "stall min_delta", ge=0)
        self._nan_seen: set[str] = set()
        self._best: dict[str, tuple[float, int]] = {}
        self._since: dict[str, int] = {}
        self._stalled: set[str] = set()

    def check(self, step: int, metrics: Mapping[str, float | None]) -> list[Alert]:
        alerts: list[Alert] = []
        for name, v in metrics.items():
            if not is_loss_name(name):
                continue
            if v is None or not math.isfinite(v):
                if name not in self._nan_seen:
                    self._nan_seen.add(name)
                    shown = "NaN" if v is None or math.isnan(v) else format_metric(v)
                    alerts.append(
                        Alert("nan_loss", self.path, f"{name} is {shown} at epoch {step + 1}", step)
                    )
                continue
            if self.patience:
                alert = self._track(name, step, v)
                if alert is not None:
                    alerts.append(alert)
        return alerts

    def _track(self, name: str, step: int, v: float) -> Alert | None:
        best = self._best.get(name)
        if best is None or v < best[0] - self.min_delta * abs(best[0]):
            self._best[name] = (v, step)
            self._since[name] = 0
            if name in self._stalled:
                self._stalled.discard(name)
                return Alert(
                    "recovered",
                    self.path,
                    f"{name} improved again to {format_metric(v)} at epoch {step + 1}",
                    step,
                )
            return None
        self._since[name] += 1
        if self._since[name] >= self.patience and name not in self._stalled:
            self._stalled.add(name)
            return Alert(
                "stalled",
                self.path,
                f"{name} has not improved for {self.patience} epochs "
                f"(best {format_metric(best[0])} at epoch {best[1] + 1})",
                step,
            )
        return None
