"""What every rank did when: compute, sync, idle and data spans, run events, and each rank's
CPU / GPU utilization samples; exported as JSON, CSV, an offline HTML page and a Chrome trace
(the last two rendered by :mod:`flodl_monitor._timeline_export`).

Times are seconds since the run's start (``origin``, a wall-clock ``time.time()``), so timelines
of different processes line up when merged (:meth:`Timeline.merge` shifts by the origins' gap).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flodl_core import CheckpointError, ConfigError, atomic_write, check_finite, check_int

from ._timeline_export import chrome_trace, render_html

SPAN_KINDS = ("compute", "sync", "idle", "data")
FORMAT_VERSION = 2
"""Version 2 added ``samples``; version 1 files (no samples) still load."""


@dataclass(frozen=True)
class TimelineSpan:
    """Rank ``rank`` was doing ``kind`` from ``start_s`` to ``end_s``."""

    rank: int
    kind: str
    start_s: float
    end_s: float

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class TimelineEvent:
    """Something that happened at ``t`` (``epoch_start``, ``sync``, ``anchor_changed`` ...)."""

    kind: str
    t: float
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TimelineSample:
    """Rank ``rank``'s utilization over the interval ending at ``t``, in percent: ``cpu_pct`` of
    one core (its process: may exceed 100), ``gpu_pct`` of its GPU; ``None``: not measured."""

    rank: int
    t: float
    cpu_pct: float | None = None
    gpu_pct: float | None = None


def _time(name: str, value: object) -> float:
    return check_finite(value, name, ge=0, expected="a finite number of seconds >= 0")


def _pct(name: str, value: object) -> float | None:
    expected = "a finite percentage >= 0 or None"
    return None if value is None else check_finite(value, name, ge=0, expected=expected)


def _json_value(key: str, value: object) -> Any:
    if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"event field {key}={value!r} is not finite (JSON cannot hold it)")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ConfigError(
        f"event field {key} is a {type(value).__name__}; use None, bool, int, float or str"
    )


def _union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        total += max(0.0, b - max(a, end))
        end = max(end, b)
    return total


class Timeline:
    """Per-rank spans and run events of one distributed run.

    Args:
        origin: the run's start as ``time.time()`` seconds (default: now).
    """

    def __init__(self, origin: float | None = None) -> None:
        expected = "a finite time.time() in seconds, or None for now"
        self.origin = (
            time.time() if origin is None else check_finite(origin, "origin", expected=expected)
        )
        self._spans: list[TimelineSpan] = []
        self._events: list[TimelineEvent] = []
        self._samples: list[TimelineSample] = []

    def now(self) -> float:
        """Seconds since ``origin``."""
        return time.time() - self.origin

    def span(self, rank: int, kind: str, start_s: float, end_s: float) -> None:
        """Record that ``rank`` spent ``[start_s, end_s]`` on ``kind`` (compute, sync, idle,
        data)."""
        check_int(rank, "rank", ge=0)
        if kind not in SPAN_KINDS:
            raise ConfigError(f"span kind must be one of {', '.join(SPAN_KINDS)}, got {kind!r}")
        start, end = _time("start_s", start_s), _time("end_s", end_s)
        if end < start:
            raise ConfigError(f"span ends before it starts: start_s={start} > end_s={end}")
        self._spans.append(TimelineSpan(rank, kind, start, end))

    def event(self, kind: str, t: float, **fields: Any) -> None:
        """Record an event, e.g. ``event("sync", 3.2, duration_ms=4.1)`` or
        ``event("anchor_changed", 9.0, old=10, new=20)``; field values are JSON scalars."""
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"event kind must be a non-empty str, got {kind!r}")
        values = {k: _json_value(k, v) for k, v in fields.items()}
        self._events.append(TimelineEvent(kind, _time("t", t), values))

    def sample(
        self, rank: int, t: float, cpu: float | None = None, gpu: float | None = None
    ) -> None:
        """Record rank ``rank``'s utilization over the interval ending at ``t``: ``cpu`` percent of
        one core (may exceed 100), ``gpu`` percent of its GPU (0-100); at least one of them."""
        check_int(rank, "rank", ge=0)
        cpu_pct, gpu_pct = _pct("cpu", cpu), _pct("gpu", gpu)
        if cpu_pct is None and gpu_pct is None:
            raise ConfigError("a utilization sample needs cpu=, gpu= or both; got neither")
        if gpu_pct is not None and gpu_pct > 100.0:
            raise ConfigError(f"gpu is a percentage of one device (0-100), got {gpu!r}")
        self._samples.append(TimelineSample(rank, _time("t", t), cpu_pct, gpu_pct))

    @property
    def spans(self) -> list[TimelineSpan]:
        return sorted(self._spans, key=lambda s: (s.rank, s.start_s, s.end_s))

    @property
    def events(self) -> list[TimelineEvent]:
        return sorted(self._events, key=lambda e: e.t)

    @property
    def samples(self) -> list[TimelineSample]:
        """Utilization samples by rank, then time."""
        return sorted(self._samples, key=lambda s: (s.rank, s.t))

    @property
    def ranks(self) -> list[int]:
        """The ranks that recorded spans or utilization samples, ascending."""
        return sorted({s.rank for s in self._spans} | {s.rank for s in self._samples})

    @property
    def total_s(self) -> float:
        """From 0 to the last span end, event or sample."""
        ends = [s.end_s for s in self._spans] + [x.t for x in (*self._events, *self._samples)]
        return max(ends, default=0.0)

    def merge(self, other: Timeline) -> Timeline:
        """Add ``other``'s spans, events and samples (e.g. another rank's), shifted onto this
        timeline's origin; returns ``self``."""
        if not isinstance(other, Timeline):
            raise ConfigError(f"merge needs a Timeline, got {type(other).__name__}")
        shift = other.origin - self.origin

        def at(t: float) -> float:
            return max(0.0, t + shift)

        self._spans += [replace(s, start_s=at(s.start_s), end_s=at(s.end_s)) for s in other._spans]
        self._events += [replace(e, t=at(e.t), fields=dict(e.fields)) for e in other._events]
        self._samples += [replace(u, t=at(u.t)) for u in other._samples]
        return self

    def summary(self) -> dict[str, Any]:
        """Numbers of the run.

        - ``total_s``; ``ranks[r]``: seconds per span kind, ``busy_s`` (covered by compute, sync
          or data spans), ``busy_pct`` and ``idle_pct = 100 − busy_pct`` of ``total_s``;
        - ``sync_count``, ``sync_avg_ms``: from ``sync`` events (their ``duration_ms`` or
          ``sync_ms``), else from sync spans (count: the most any rank has);
        - ``anchor_changes``, ``throttles``, ``epochs``: counts of ``anchor_changed``,
          ``throttle`` and ``epoch_end`` events; ``event_counts`` per kind;
        - ``utilization[r]`` per sampled rank: ``samples``, ``cpu_avg_pct`` / ``cpu_max_pct``,
          ``gpu_avg_pct`` / ``gpu_max_pct`` (``None`` without readings); each sample weighs the
          time since the rank's previous one (the first: as the second).
        """
        total = self.total_s
        per_rank: dict[int, dict[str, float]] = {}
        for r in self.ranks:
            mine = [s for s in self._spans if s.rank == r]
            row = {f"{k}_s": sum(s.duration_s for s in mine if s.kind == k) for k in SPAN_KINDS}
            row["busy_s"] = _union_s((s.start_s, s.end_s) for s in mine if s.kind != "idle")
            row["busy_pct"] = 100.0 * row["busy_s"] / total if total > 0 else 0.0
            row["idle_pct"] = 100.0 - row["busy_pct"] if total > 0 else 0.0
            per_rank[r] = row
        syncs = [e.fields for e in self._events if e.kind == "sync"]
        if syncs:
            count = len(syncs)
            ms = [f.get("duration_ms", f.get("sync_ms")) for f in syncs]
            ms = [float(v) for v in ms if isinstance(v, (int, float))]
        else:
            spans = [s for s in self._spans if s.kind == "sync"]
            count = max(Counter(s.rank for s in spans).values(), default=0)
            ms = [1000.0 * s.duration_s for s in spans]
        kinds = Counter(e.kind for e in self._events)
        return {
            "total_s": total,
            "ranks": per_rank,
            "sync_count": count,
            "sync_avg_ms": sum(ms) / len(ms) if ms else 0.0,
            "anchor_changes": kinds.get("anchor_changed", 0),
            "throttles": kinds.get("throttle", 0),
            "epochs": kinds.get("epoch_end", 0),
            "span_count": len(self._spans),
            "event_count": len(self._events),
            "event_counts": dict(sorted(kinds.items())),
            "sample_count": len(self._samples),
            "utilization": _utilization(self.samples),
        }

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types: ``{"version", "origin", "spans": [[rank, kind, start, end]],
        "events": [{"kind", "t", "fields"}], "samples": [[rank, t, cpu_pct, gpu_pct]]}`` (a
        missing percentage is ``null``)."""
        return {
            "version": FORMAT_VERSION,
            "origin": self.origin,
            "spans": [[s.rank, s.kind, s.start_s, s.end_s] for s in self.spans],
            "events": [{"kind": e.kind, "t": e.t, "fields": dict(e.fields)} for e in self.events],
            "samples": [[u.rank, u.t, u.cpu_pct, u.gpu_pct] for u in self.samples],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Timeline:
        """Rebuild a timeline from :meth:`to_dict`'s output (every value re-validated; a
        version 1 dict, from before utilization samples, loads with none)."""
        try:
            if data["version"] not in (1, FORMAT_VERSION):
                raise CheckpointError(
                    f"timeline format version {data['version']!r} is not 1 or {FORMAT_VERSION}"
                )
            tl = cls(origin=float(data["origin"]))
            for rank, kind, start, end in data["spans"]:
                tl.span(rank, kind, start, end)
            for e in data["events"]:
                tl.event(e["kind"], e["t"], **e["fields"])
            for rank, t, cpu, gpu in data["samples"] if data["version"] > 1 else ():
                tl.sample(rank, t, cpu=cpu, gpu=gpu)
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"not a timeline dict: {e}") from None
        return tl

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_dict` plus :meth:`summary` as JSON, atomically."""
        summary = self.summary()
        for key in ("ranks", "utilization"):  # JSON object keys are strings
            summary[key] = {str(r): v for r, v in summary[key].items()}
        doc = json.dumps({**self.to_dict(), "summary": summary}, indent=1, allow_nan=False)
        return atomic_write(path, doc, parents=True)

    def save_csv(self, path: str | os.PathLike[str]) -> Path:
        """One row per span, event and sample: ``record, rank, kind, start_s, end_s, duration_ms,
        fields`` (events and samples: ``start_s = end_s = t``, fields as JSON; samples: kind
        ``utilization``, fields ``{"cpu_pct", "gpu_pct"}``)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["record", "rank", "kind", "start_s", "end_s", "duration_ms", "fields"])
        for s in self.spans:
            times = (f"{s.start_s:.6f}", f"{s.end_s:.6f}", f"{1000 * s.duration_s:.3f}")
            w.writerow(["span", s.rank, s.kind, *times, ""])
        for e in self.events:
            f, t = e.fields, f"{e.t:.6f}"
            dumped = json.dumps(f, sort_keys=True)
            w.writerow(["event", f.get("rank", ""), e.kind, t, t, f.get("duration_ms", ""), dumped])
        for u in self.samples:
            t, pct = f"{u.t:.6f}", {"cpu_pct": u.cpu_pct, "gpu_pct": u.gpu_pct}
            w.writerow(["sample", u.rank, "utilization", t, t, "", json.dumps(pct, sort_keys=True)])
        return atomic_write(path, buf.getvalue(), parents=True)

    def save_html(self, path: str | os.PathLike[str], title: str = "flodl timeline") -> Path:
        """One offline page (no script, no external resource): a lane per rank, its utilization
        under it when sampled, event markers, the summary table, and the data as a JSON block."""
        if not isinstance(title, str):
            raise ConfigError(f"save_html: title must be a str, got {type(title).__name__}")
        return atomic_write(path, render_html(self, title), parents=True)

    def to_chrome_trace(self) -> dict[str, Any]:
        """The timeline in the Trace Event Format (see ``_timeline_export.chrome_trace``)."""
        return chrome_trace(self, FORMAT_VERSION)

    def save_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_chrome_trace` as JSON, atomically, for https://ui.perfetto.dev or
        ``chrome://tracing``."""
        return atomic_write(path, json.dumps(self.to_chrome_trace(), allow_nan=False), parents=True)


def _weighted(pairs: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """Time-weighted mean and max of ``(weight, value)`` pairs (``None`` when empty)."""
    if not pairs:
        return None, None
    total, values = sum(w for w, _ in pairs), [v for _, v in pairs]
    mean = sum(w * v for w, v in pairs) / total if total > 0 else sum(values) / len(values)
    return mean, max(values)


def _utilization(samples: list[TimelineSample]) -> dict[int, dict[str, Any]]:
    """Per rank, the count, time-weighted mean and max of its CPU and GPU samples (sorted)."""
    out: dict[int, dict[str, Any]] = {}
    for r, group in itertools.groupby(samples, key=lambda s: s.rank):
        mine = list(group)
        gaps = [b.t - a.t for a, b in itertools.pairwise(mine)]
        weighted = list(zip([gaps[0] if gaps else 1.0, *gaps], mine, strict=True))
        out[r] = {"samples": len(mine)}
        for key in ("cpu", "gpu"):
            pairs = [(w, v) for w, s in weighted if (v := getattr(s, f"{key}_pct")) is not None]
            out[r][f"{key}_avg_pct"], out[r][f"{key}_max_pct"] = _weighted(pairs)
    return out
