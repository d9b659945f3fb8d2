"""Trend queries over epoch histories, and the reductions ``collect_with`` applies to tensors.

A :class:`Trend` is a read-only view of one metric's epoch history (one value per ``flush``);
its queries drive training decisions (decay the LR when the loss stalls, stop when it has
converged). A :class:`TrendGroup` asks the same questions of several metrics at once.

Window convention (shared by every query): ``window=0`` means all points, ``window=n`` the last
``n`` points (all of them when fewer exist).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import Enum

import torch

from flodl_core import ConfigError, PathError, ShapeError, check_int

__all__ = ["MetricStore", "Reduce", "Trend", "TrendGroup", "ols_slope"]

# Below this the x-spread is numerically zero; floDl (Rust) returns a flat slope there too.
_DEGENERATE = 1e-15


def _check_window(window: int) -> int:
    return check_int(window, "trend window", ge=0, note="0 = all points")


def _check_tol(tol: float) -> float:
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not tol >= 0:
        raise ConfigError(f"trend tolerance must be a number >= 0, got {tol!r}")
    return float(tol)


def ols_slope(ys: Sequence[float]) -> float:
    """Ordinary least-squares slope of ``ys`` against ``x = 0 .. n-1``.

    ``(n Σxy − Σx Σy) / (n Σx² − (Σx)²)``; 0.0 for fewer than two points.
    """
    n = len(ys)
    if n < 2:
        return 0.0
    sx = sxx = sy = sxy = 0.0
    for i, y in enumerate(ys):
        sx += i
        sxx += i * i
        sy += y
        sxy += i * y
    den = n * sxx - sx * sx
    if abs(den) < _DEGENERATE:
        return 0.0
    return (n * sxy - sx * sy) / den


class Trend:
    """One metric's epoch history with queries over it.

    Built by ``graph.trend(tag)``; holds a copy, so later flushes do not change it.
    """

    __slots__ = ("_values", "name")

    def __init__(self, values: Iterable[float], name: str = "") -> None:
        self._values: tuple[float, ...] = tuple(float(v) for v in values)
        self.name = name

    def _window(self, window: int) -> tuple[float, ...]:
        w = _check_window(window)
        return self._values if w == 0 or w >= len(self._values) else self._values[-w:]

    def slope(self, window: int = 0) -> float:
        """OLS slope per epoch over the window (0.0 with fewer than two points)."""
        return ols_slope(self._window(window))

    def stalled(self, window: int, tol: float) -> bool:
        """``|slope(window)| < tol``. True on fewer than two points (the slope is 0 there)."""
        return abs(self.slope(window)) < _check_tol(tol)

    def improving(self, window: int = 0) -> bool:
        """``slope(window) < 0``: the metric is going down (meant for losses)."""
        return self.slope(window) < 0.0

    def converged(self, window: int, tol: float) -> bool:
        """Population variance (divide by n) of the window ``< tol``; needs two points or more."""
        tol = _check_tol(tol)
        ys = self._window(window)
        n = len(ys)
        if n < 2:
            return False
        mean = math.fsum(ys) / n
        var = math.fsum((y - mean) ** 2 for y in ys) / n
        return var < tol

    def latest(self) -> float:
        """The last value (0.0 when empty)."""
        return self._values[-1] if self._values else 0.0

    def mean(self) -> float:
        """Mean of all values (0.0 when empty)."""
        return math.fsum(self._values) / len(self._values) if self._values else 0.0

    def min(self) -> float:
        """Smallest value (+inf when empty)."""
        return min(self._values, default=math.inf)

    def max(self) -> float:
        """Largest value (-inf when empty)."""
        return max(self._values, default=-math.inf)

    def last(self, n: int) -> list[float]:
        """The last ``n`` values (all of them when fewer exist)."""
        n = check_int(n, "n", ge=0, where="last(n)")
        return list(self._values[-n:]) if n else []

    def values(self) -> list[float]:
        """Every value, oldest first."""
        return list(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)

    def __repr__(self) -> str:
        head = f"Trend({self.name!r}, " if self.name else "Trend("
        return f"{head}n={len(self._values)}, latest={self.latest():.6g})"


class TrendGroup:
    """Several named trends queried together (``graph.trends(["loss_a", "loss_b"])``).

    ``all_*`` is False and ``any_*`` is False for an empty group, so an empty selection never
    triggers a decision.
    """

    __slots__ = ("_trends",)

    def __init__(self, trends: Mapping[str, Trend] | Iterable[Trend]) -> None:
        if isinstance(trends, Mapping):
            self._trends: dict[str, Trend] = dict(trends)
        elif isinstance(trends, Iterable):
            self._trends = {getattr(t, "name", "") or str(i): t for i, t in enumerate(trends)}
        else:
            raise ConfigError(
                f"TrendGroup: expected a mapping or a list of Trend, got {type(trends).__name__}"
            )
        bad = {n: type(t).__name__ for n, t in self._trends.items() if not isinstance(t, Trend)}
        if bad:
            raise ConfigError(f"TrendGroup: members must be Trend objects, got {bad}")

    def __len__(self) -> int:
        return len(self._trends)

    def __iter__(self) -> Iterator[Trend]:
        return iter(self._trends.values())

    def __getitem__(self, name: str) -> Trend:
        try:
            return self._trends[name]
        except KeyError:
            raise PathError(f"no trend named {name!r} in this group", self._trends) from None

    def names(self) -> list[str]:
        """The trend names, in group order."""
        return list(self._trends)

    def slopes(self, window: int = 0) -> list[float]:
        """Every trend's slope over the window, in group order."""
        return [t.slope(window) for t in self._trends.values()]

    def mean_slope(self, window: int = 0) -> float:
        """Mean of :meth:`slopes` (0.0 for an empty group)."""
        s = self.slopes(window)
        return math.fsum(s) / len(s) if s else 0.0

    def _all(self, pred: Iterable[bool]) -> bool:
        return bool(self._trends) and all(pred)

    def all_improving(self, window: int = 0) -> bool:
        return self._all(t.improving(window) for t in self._trends.values())

    def all_stalled(self, window: int, tol: float) -> bool:
        return self._all(t.stalled(window, tol) for t in self._trends.values())

    def all_converged(self, window: int, tol: float) -> bool:
        return self._all(t.converged(window, tol) for t in self._trends.values())

    def any_improving(self, window: int = 0) -> bool:
        return any(t.improving(window) for t in self._trends.values())

    def any_stalled(self, window: int, tol: float) -> bool:
        return any(t.stalled(window, tol) for t in self._trends.values())

    def any_converged(self, window: int, tol: float) -> bool:
        return any(t.converged(window, tol) for t in self._trends.values())

    def __repr__(self) -> str:
        return f"TrendGroup({', '.join(self._trends)})"


class Reduce(Enum):
    """How ``collect_with`` turns a non-scalar tagged tensor into one number."""

    MEAN = "mean"
    SUM = "sum"
    MAX = "max"
    MIN = "min"
    NORM = "norm"  # L2 over all elements (Frobenius for matrices)

    def apply(self, x: torch.Tensor, what: str = "tensor") -> float:
        """Reduce ``x`` (any shape, at least one element) to a Python float."""
        if x.numel() == 0:
            raise ShapeError(
                f"{what} is empty (shape {tuple(x.shape)}); cannot reduce it with {self.name}"
            )
        x = x.detach()
        if self is Reduce.MEAN:
            # Integer tensors have no mean in torch; the metric is a float anyway.
            r = x.float().mean() if not x.is_floating_point() else x.mean()
        elif self is Reduce.SUM:
            r = x.sum()
        elif self is Reduce.MAX:
            r = x.max()
        elif self is Reduce.MIN:
            r = x.min()
        else:
            r = torch.linalg.vector_norm(x if x.is_floating_point() else x.float())
        return float(r.item())


class MetricStore:
    """Per-batch buffers and per-epoch histories of named scalar metrics.

    ``add`` appends to the batch buffer; ``flush`` moves the arithmetic mean of each buffer into
    the epoch history. ``order`` keeps first-seen order so exports and dotted metric listings are
    stable from run to run.
    """

    __slots__ = ("batch", "history", "order")

    def __init__(self) -> None:
        self.batch: dict[str, list[float]] = {}
        self.history: dict[str, list[float]] = {}
        self.order: list[str] = []

    def add(self, name: str, values: Iterable[float]) -> None:
        buf = self.batch.get(name)
        if buf is None:
            buf = self.batch[name] = []
            if name not in self.history:
                self.order.append(name)
        buf.extend(values)

    def flush(self, names: Iterable[str] = ()) -> bool:
        """Mean of each named buffer (all buffers when ``names`` is empty) into the history.

        Returns whether anything was flushed. An empty buffer contributes nothing.
        """
        keys = list(names) or list(self.batch)
        flushed = False
        for k in keys:
            buf = self.batch.pop(k, None)
            if buf:
                self.history.setdefault(k, []).append(math.fsum(buf) / len(buf))
                flushed = True
        return flushed

    def reset(self, names: Iterable[str] = ()) -> None:
        """Forget the epoch history of ``names`` (every metric when empty)."""
        keys = list(names)
        if not keys:
            self.history.clear()
            self.order = [k for k in self.order if k in self.batch]
            return
        for k in keys:
            self.history.pop(k, None)
        self.order = [k for k in self.order if k in self.batch or k in self.history]

    def known(self) -> list[str]:
        """Every metric name with a buffer or a history, first-seen order."""
        return [k for k in self.order if k in self.batch or k in self.history]

    def latest(self) -> dict[str, float]:
        """The last epoch value of every metric with a history, first-seen order."""
        return {k: self.history[k][-1] for k in self.order if self.history.get(k)}

    def histories(self, names: Iterable[str] = ()) -> dict[str, list[float]]:
        """Copies of the histories of ``names`` (every metric with a history when empty)."""
        keys = list(names) or [k for k in self.order if self.history.get(k)]
        return {k: list(self.history.get(k, ())) for k in keys}
