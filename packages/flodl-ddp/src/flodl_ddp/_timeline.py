"""What every rank did when: compute, sync, idle and data-loading spans, run events, and each
rank's CPU / GPU utilization samples.

Times are seconds since the run's start (``origin``, a wall-clock ``time.time()``), so timelines
recorded in different processes line up when merged: :meth:`Timeline.merge` shifts the other
timeline by the difference of the origins. Exports: JSON (:meth:`Timeline.to_dict`), CSV, one
self-contained HTML page with an inline SVG (one lane per rank, no JavaScript, no CDN), and a
Chrome trace (:meth:`Timeline.save_chrome_trace`, for Perfetto or ``chrome://tracing``).
"""

from __future__ import annotations

import csv
import html
import io
import itertools
import json
import math
import os
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flodl_core import CheckpointError, ConfigError, atomic_write

SPAN_KINDS = ("compute", "sync", "idle", "data")
COLORS = {"compute": "#2e9e5b", "sync": "#e0892b", "idle": "#c9ccd1", "data": "#3c7fd1"}
UTIL_COLORS = {"cpu": "#5b4bb7", "gpu": "#c23b6e"}
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
    one core (its process, every thread: may exceed 100), ``gpu_pct`` of its GPU; either is
    ``None`` when not measured."""

    rank: int
    t: float
    cpu_pct: float | None = None
    gpu_pct: float | None = None


def _time(name: str, value: object) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0:  # type: ignore[operator]
        raise ConfigError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _pct(name: str, value: object) -> float | None:
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0:  # type: ignore[operator]
        raise ConfigError(f"{name} must be a finite percentage >= 0 or None, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _rank(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"rank must be an int >= 0, got {value!r}")
    return value


def _json_value(key: str, value: object) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(f"event field {key}={value!r} is not finite (JSON cannot hold it)")
        return value
    if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
        return _json_value(key, value.item())
    raise ConfigError(
        f"event field {key} is a {type(value).__name__}; use None, bool, int, float or str"
    )


def _write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write(path, text, parents=True)


def _union_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


class Timeline:
    """Per-rank spans and run events of one distributed run.

    Args:
        origin: the run's start as ``time.time()`` seconds (default: now).
    """

    def __init__(self, origin: float | None = None) -> None:
        self.origin = time.time() if origin is None else float(origin)
        self._spans: list[TimelineSpan] = []
        self._events: list[TimelineEvent] = []
        self._samples: list[TimelineSample] = []

    def now(self) -> float:
        """Seconds since ``origin``."""
        return time.time() - self.origin

    # ---- recording ------------------------------------------------------------------------------

    def span(self, rank: int, kind: str, start_s: float, end_s: float) -> None:
        """Record that ``rank`` spent ``[start_s, end_s]`` on ``kind`` (compute, sync, idle,
        data)."""
        _rank(rank)
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
        one core (may exceed 100), ``gpu`` percent of its GPU (0-100); at least one of them (see
        :class:`~flodl_ddp._utilization.UtilizationSampler`, which measures both)."""
        _rank(rank)
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
        ends = [s.end_s for s in self._spans] + [e.t for e in self._events]
        ends += [s.t for s in self._samples]
        return max(ends, default=0.0)

    def merge(self, other: Timeline) -> Timeline:
        """Add ``other``'s spans, events and samples (e.g. another rank's), shifted onto this
        timeline's origin; returns ``self``."""
        if not isinstance(other, Timeline):
            raise ConfigError(f"merge needs a Timeline, got {type(other).__name__}")
        shift = other.origin - self.origin
        for s in other._spans:
            self._spans.append(
                TimelineSpan(s.rank, s.kind, max(0.0, s.start_s + shift), max(0.0, s.end_s + shift))
            )
        for e in other._events:
            self._events.append(TimelineEvent(e.kind, max(0.0, e.t + shift), dict(e.fields)))
        for u in other._samples:
            self._samples.append(
                TimelineSample(u.rank, max(0.0, u.t + shift), u.cpu_pct, u.gpu_pct)
            )
        return self

    # ---- summary --------------------------------------------------------------------------------

    def summary(self) -> dict[str, Any]:
        """Numbers of the run.

        - ``total_s``; per rank (``ranks[r]``): seconds per span kind, ``busy_s`` (time covered
          by compute, sync or data spans), ``busy_pct`` and ``idle_pct = 100 − busy_pct`` of
          ``total_s`` (explicit idle spans and uncovered gaps both count as idle);
        - ``sync_count`` and ``sync_avg_ms``: from ``sync`` events (their ``duration_ms`` or
          ``sync_ms`` field);
          without such events, from the sync spans (count: the most any rank has);
        - ``anchor_changes``, ``throttles``, ``epochs``: counts of ``anchor_changed``,
          ``throttle`` and ``epoch_end`` events; ``event_counts`` per kind;
        - ``utilization[r]`` for each rank with samples: ``samples`` (count), ``cpu_avg_pct`` /
          ``cpu_max_pct`` and ``gpu_avg_pct`` / ``gpu_max_pct`` (``None`` without readings);
          averages are weighted by the time each sample covers (its gap to the rank's previous
          sample; the first sample weighs as the second's gap), so a sample taken after a long
          wait counts for that whole wait.
        """
        total = self.total_s
        per_rank: dict[int, dict[str, float]] = {}
        for r in self.ranks:
            mine = [s for s in self._spans if s.rank == r]
            row = {f"{k}_s": sum(s.duration_s for s in mine if s.kind == k) for k in SPAN_KINDS}
            busy = _union_s((s.start_s, s.end_s) for s in mine if s.kind != "idle")
            row["busy_s"] = busy
            row["busy_pct"] = 100.0 * busy / total if total > 0 else 0.0
            row["idle_pct"] = 100.0 - row["busy_pct"] if total > 0 else 0.0
            per_rank[r] = row
        syncs = [e for e in self._events if e.kind == "sync"]
        if syncs:
            count = len(syncs)
            ms = [
                float(e.fields.get("duration_ms", e.fields.get("sync_ms")))
                for e in syncs
                if isinstance(e.fields.get("duration_ms", e.fields.get("sync_ms")), (int, float))
            ]
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

    # ---- serialisation --------------------------------------------------------------------------

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
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, CheckpointError):
                raise
            raise CheckpointError(f"not a timeline dict: {e}") from None
        return tl

    def save_json(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_dict` plus :meth:`summary` as JSON, atomically."""
        doc = {**self.to_dict(), "summary": _jsonable_summary(self.summary())}
        return _write_atomic(path, json.dumps(doc, indent=1, allow_nan=False))

    def save_csv(self, path: str | os.PathLike[str]) -> Path:
        """One row per span, event and utilization sample: ``record, rank, kind, start_s, end_s,
        duration_ms, fields`` (events: ``start_s = end_s = t``, fields as JSON; samples:
        ``record = sample``, ``kind = utilization``, ``start_s = end_s = t``, fields
        ``{"cpu_pct", "gpu_pct"}``)."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["record", "rank", "kind", "start_s", "end_s", "duration_ms", "fields"])
        for s in self.spans:
            w.writerow(
                [
                    "span",
                    s.rank,
                    s.kind,
                    f"{s.start_s:.6f}",
                    f"{s.end_s:.6f}",
                    f"{1000 * s.duration_s:.3f}",
                    "",
                ]
            )
        for e in self.events:
            rank = e.fields.get("rank", "")
            dur = e.fields.get("duration_ms", "")
            w.writerow(
                [
                    "event",
                    rank,
                    e.kind,
                    f"{e.t:.6f}",
                    f"{e.t:.6f}",
                    dur,
                    json.dumps(e.fields, sort_keys=True),
                ]
            )
        for u in self.samples:
            fields = {"cpu_pct": u.cpu_pct, "gpu_pct": u.gpu_pct}
            w.writerow(
                ["sample", u.rank, "utilization", f"{u.t:.6f}", f"{u.t:.6f}", "",
                 json.dumps(fields, sort_keys=True)]
            )  # fmt: skip
        return _write_atomic(path, buf.getvalue())

    def save_html(self, path: str | os.PathLike[str], title: str = "flodl DDP timeline") -> Path:
        """One offline page: a lane per rank (compute, sync, idle, data in colour), under it the
        rank's CPU / GPU utilization as lines when it was sampled, event markers, and the
        summary table. No executable script, no external resource; the data rides along as a
        JSON block."""
        return _write_atomic(path, render_html(self, title))

    def to_chrome_trace(self) -> dict[str, Any]:
        """The timeline in the Trace Event Format (see :func:`chrome_trace`)."""
        return chrome_trace(self)

    def save_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_chrome_trace` as JSON, atomically: open it in https://ui.perfetto.dev
        or ``chrome://tracing`` (one process track per rank, spans as slices, events as
        instants, utilization as counter tracks)."""
        return _write_atomic(path, json.dumps(self.to_chrome_trace(), allow_nan=False))


def _weighted(pairs: list[tuple[float, float]]) -> tuple[float | None, float | None]:
    """Time-weighted mean and max of ``(weight, value)`` pairs (``None`` when empty)."""
    if not pairs:
        return None, None
    total = sum(w for w, _ in pairs)
    mean = (
        sum(w * v for w, v in pairs) / total if total > 0 else sum(v for _, v in pairs) / len(pairs)
    )
    return mean, max(v for _, v in pairs)


def _utilization(samples: list[TimelineSample]) -> dict[int, dict[str, Any]]:
    """Per rank, the count, time-weighted mean and max of its CPU and GPU samples (sorted by
    rank then time)."""
    out: dict[int, dict[str, Any]] = {}
    for r in sorted({s.rank for s in samples}):
        mine = [s for s in samples if s.rank == r]
        gaps = [b.t - a.t for a, b in itertools.pairwise(mine)]
        weights = [gaps[0] if gaps else 1.0, *gaps]
        both = list(zip(weights, mine, strict=True))
        cpu = [(w, s.cpu_pct) for w, s in both if s.cpu_pct is not None]
        gpu = [(w, s.gpu_pct) for w, s in both if s.gpu_pct is not None]
        cpu_avg, cpu_max = _weighted(cpu)
        gpu_avg, gpu_max = _weighted(gpu)
        out[r] = {
            "samples": len(mine),
            "cpu_avg_pct": cpu_avg,
            "cpu_max_pct": cpu_max,
            "gpu_avg_pct": gpu_avg,
            "gpu_max_pct": gpu_max,
        }
    return out


def _jsonable_summary(summary: dict[str, Any]) -> dict[str, Any]:
    out = dict(summary)
    out["ranks"] = {str(r): v for r, v in summary["ranks"].items()}
    out["utilization"] = {str(r): v for r, v in summary["utilization"].items()}
    return out


# ---- HTML ---------------------------------------------------------------------------------------

_LANE_H = 26
_UTIL_H = 34
_LEFT = 70
_WIDTH = 1100


def _util_lane(tl: Timeline, r: int, y: float, x: Any) -> list[str]:
    """Rank ``r``'s CPU and GPU utilization as polylines in a lane at ``y`` (0 % at its bottom;
    its top is 100 % or the highest CPU reading, whichever is more)."""
    mine = [u for u in tl.samples if u.rank == r]
    top = max([100.0, *(u.cpu_pct or 0.0 for u in mine)])
    h = _UTIL_H - 6
    parts = [
        f'<text x="4" y="{y + 20}" class="lane">util {r}</text>',
        f'<rect x="{_LEFT}" y="{y + 3}" width="{_WIDTH - _LEFT - 10}" height="{h}" '
        'fill="#fafafb"/>',
    ]
    for key, attr in (("cpu", "cpu_pct"), ("gpu", "gpu_pct")):
        pts = [(u.t, getattr(u, attr)) for u in mine if getattr(u, attr) is not None]
        if not pts:
            continue
        coords = " ".join(f"{x(t):.2f},{y + 3 + h - h * v / top:.2f}" for t, v in pts)
        values = [v for _, v in pts]
        tip = (
            f"rank {r} {key.upper()} %: {len(pts)} samples, mean {sum(values) / len(values):.0f} "
            f"%, max {max(values):.0f} %"
        )
        parts.append(
            f'<polyline class="util {key}" points="{coords}" fill="none" '
            f'stroke="{UTIL_COLORS[key]}" stroke-width="1.5"><title>{html.escape(tip)}</title>'
            "</polyline>"
        )
    return parts


def render_html(tl: Timeline, title: str) -> str:
    """The page :meth:`Timeline.save_html` writes."""
    summary = tl.summary()
    total = summary["total_s"] or 1.0
    ranks = tl.ranks or [0]
    sampled = {u.rank for u in tl.samples}
    plot_w = _WIDTH - _LEFT - 10
    top = 24
    height = top + _LANE_H * len(ranks) + _UTIL_H * len(sampled) + 30

    def x(t: float) -> float:
        return _LEFT + plot_w * t / total

    parts = [
        f'<svg viewBox="0 0 {_WIDTH} {height}" width="100%" role="img" '
        f'aria-label="{html.escape(title)}">'
    ]
    y = top
    for r in ranks:
        parts.append(f'<text x="4" y="{y + 17}" class="lane">rank {r}</text>')
        parts.append(
            f'<rect x="{_LEFT}" y="{y + 3}" width="{plot_w}" height="{_LANE_H - 6}" '
            'fill="#f4f5f7"/>'
        )
        for s in tl.spans:
            if s.rank != r:
                continue
            w = max(x(s.end_s) - x(s.start_s), 0.5)
            tip = (
                f"rank {r} {s.kind} {s.start_s:.3f}-{s.end_s:.3f} s ({1000 * s.duration_s:.1f} ms)"
            )
            parts.append(
                f'<rect class="{s.kind}" x="{x(s.start_s):.2f}" y="{y + 3}" width="{w:.2f}" '
                f'height="{_LANE_H - 6}" fill="{COLORS[s.kind]}"><title>{html.escape(tip)}'
                "</title></rect>"
            )
        y += _LANE_H
        if r in sampled:
            parts += _util_lane(tl, r, y, x)
            y += _UTIL_H
    bottom = y
    for e in tl.events:
        if e.kind in ("epoch_start", "epoch_end", "anchor_changed", "throttle"):
            color = "#7a3db8" if e.kind == "anchor_changed" else "#444"
            tip = f"{e.kind} at {e.t:.3f} s {json.dumps(e.fields, sort_keys=True)}"
            parts.append(
                f'<line class="event {e.kind}" x1="{x(e.t):.2f}" x2="{x(e.t):.2f}" y1="{top - 4}" '
                f'y2="{bottom}" stroke="{color}" stroke-dasharray="3,2">'
                f"<title>{html.escape(tip)}</title></line>"
            )
    for k in range(6):
        t = total * k / 5
        parts.append(
            f'<text x="{x(t):.2f}" y="{bottom + 18}" class="tick" text-anchor="middle">'
            f"{t:.2f} s</text>"
        )
    parts.append("</svg>")
    keys = list(COLORS.items())
    if sampled:
        keys += [(f"{k.upper()} %", c) for k, c in UTIL_COLORS.items()]
    legend = " ".join(
        f'<span class="key"><i style="background:{c}"></i>{k}</span>' for k, c in keys
    )
    util = summary["utilization"]

    def pct(r: int, key: str) -> str:
        v = util.get(r, {}).get(key)
        return "—" if v is None else f"{v:.0f} %"

    rows = "".join(
        f"<tr><td>rank {r}</td><td>{v['compute_s']:.3f}</td><td>{v['sync_s']:.3f}</td>"
        f"<td>{v['data_s']:.3f}</td><td>{v['idle_s']:.3f}</td><td>{v['busy_pct']:.1f} %</td>"
        f"<td>{v['idle_pct']:.1f} %</td><td>{pct(r, 'cpu_avg_pct')}</td>"
        f"<td>{pct(r, 'gpu_avg_pct')}</td></tr>"
        for r, v in summary["ranks"].items()
    )
    facts = (
        f"total {summary['total_s']:.3f} s · {summary['sync_count']} syncs, "
        f"avg {summary['sync_avg_ms']:.2f} ms · {summary['anchor_changes']} anchor changes · "
        f"{summary['throttles']} throttles · {summary['epochs']} epochs"
    )
    data = json.dumps(tl.to_dict(), allow_nan=False).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body{{font:14px system-ui,sans-serif;margin:24px;color:#222}}
.lane,.tick{{font:12px system-ui,sans-serif;fill:#333}}
.key{{margin-right:14px}} .key i{{display:inline-block;width:12px;height:12px;margin-right:4px;
vertical-align:middle}}
table{{border-collapse:collapse;margin-top:12px}}
td,th{{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}}
td:first-child,th:first-child{{text-align:left}}
</style></head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(facts)}</p>
<p>{legend}</p>
{"".join(parts)}
<table><tr><th>rank</th><th>compute s</th><th>sync s</th><th>data s</th><th>idle s</th>
<th>busy</th><th>idle</th><th>CPU avg</th><th>GPU avg</th></tr>{rows}</table>
<script type="application/json" id="timeline-data">{data}</script>
</body></html>
"""


# ---- Chrome trace -------------------------------------------------------------------------------

TRACE_COLORS = {
    "compute": "thread_state_running",
    "sync": "thread_state_iowait",
    "idle": "grey",
    "data": "rail_load",
}
"""Span kind -> a colour name of the Trace Event Format's reserved palette (``cname``)."""


def trace_pid(rank: int) -> int:
    """The trace's process (and thread) id of ``rank``: ``rank + 1``, because viewers treat pid
    and tid 0 as the kernel's idle task."""
    return rank + 1


def _us(t: float) -> float:
    return round(t * 1e6, 3)


def chrome_trace(tl: Timeline) -> dict[str, Any]:
    """The timeline in the Trace Event Format (the JSON ``chrome://tracing`` and Perfetto open).

    One process per rank (``pid = tid = rank + 1``, named ``rank N``, sorted by rank): its spans
    are complete events (``ph: "X"``, ``cat`` and ``name`` the span kind), events carrying an int
    ``rank`` field are instants on that rank's thread (``ph: "i"``, ``s: "t"``), other events are
    global instants (``s: "g"``), and utilization samples are counter tracks ``CPU`` and ``GPU``
    of the rank's process (``ph: "C"``, one series ``%``). Timestamps are microseconds since the
    run's start; ``otherData.origin_unix_s`` is that start.
    """
    meta: list[dict[str, Any]] = []
    for r in tl.ranks:
        pid = trace_pid(r)
        name = f"rank {r}"
        meta += [
            {"name": "process_name", "ph": "M", "pid": pid, "tid": pid, "args": {"name": name}},
            {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": pid,
             "args": {"sort_index": r}},
            {"name": "thread_name", "ph": "M", "pid": pid, "tid": pid, "args": {"name": name}},
        ]  # fmt: skip
    timed: list[dict[str, Any]] = []
    for s in tl.spans:
        pid = trace_pid(s.rank)
        timed.append(
            {"name": s.kind, "cat": s.kind, "ph": "X", "ts": _us(s.start_s),
             "dur": _us(s.duration_s), "pid": pid, "tid": pid, "cname": TRACE_COLORS[s.kind],
             "args": {}}
        )  # fmt: skip
    ranks = set(tl.ranks)
    first = trace_pid(min(ranks)) if ranks else trace_pid(0)
    for e in tl.events:
        rank = e.fields.get("rank")
        on_rank = isinstance(rank, int) and not isinstance(rank, bool) and rank in ranks
        pid = trace_pid(rank) if on_rank else first  # type: ignore[arg-type]
        timed.append(
            {"name": e.kind, "cat": "event", "ph": "i", "s": "t" if on_rank else "g",
             "ts": _us(e.t), "pid": pid, "tid": pid, "args": dict(e.fields)}
        )  # fmt: skip
    for u in tl.samples:
        pid = trace_pid(u.rank)
        for name, v in (("CPU", u.cpu_pct), ("GPU", u.gpu_pct)):
            if v is not None:
                timed.append(
                    {"name": name, "cat": "utilization", "ph": "C", "ts": _us(u.t), "pid": pid,
                     "tid": pid, "args": {"%": round(v, 3)}}
                )  # fmt: skip
    timed.sort(key=lambda ev: ev["ts"])
    return {
        "traceEvents": meta + timed,
        "displayTimeUnit": "ms",
        "otherData": {
            "generator": "flodl-ddp Timeline",
            "version": FORMAT_VERSION,
            "origin_unix_s": tl.origin,
        },
    }
