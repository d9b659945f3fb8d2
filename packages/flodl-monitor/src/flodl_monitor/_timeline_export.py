"""The renderers of a :class:`~flodl_monitor.Timeline`: one offline HTML page (inline SVG, no
executable script, no external resource) and a Chrome trace (the Trace Event Format).

``tl`` is read through its public surface only (``spans``, ``events``, ``samples``, ``ranks``,
``summary()``, ``to_dict()``, ``origin``); this module imports nothing of the package, so the
dependency runs one way: :mod:`flodl_monitor._timeline` imports it.
"""

from __future__ import annotations

import html
import json
from string import Template
from typing import Any

COLORS = {"compute": "#2e9e5b", "sync": "#e0892b", "idle": "#c9ccd1", "data": "#3c7fd1"}
UTIL_COLORS = {"cpu": "#5b4bb7", "gpu": "#c23b6e"}
MARKED = ("epoch_start", "epoch_end", "anchor_changed", "throttle")
"""The event kinds the HTML page draws as vertical markers."""
_LANE_H, _UTIL_H, _LEFT, _WIDTH = 26, 34, 70, 1100
_PLOT_W = _WIDTH - _LEFT - 10

_PAGE = Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>$title</title><style>
body{font:14px system-ui,sans-serif;margin:24px;color:#222} .key{margin-right:14px}
.lane,.tick{font:12px system-ui,sans-serif;fill:#333}
.key i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
table{border-collapse:collapse;margin-top:12px} td:first-child,th:first-child{text-align:left}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}</style></head><body>
<h1>$title</h1><p>$facts</p><p>$legend</p>
$svg
<table><tr><th>rank</th><th>compute s</th><th>sync s</th><th>data s</th><th>idle s</th>
<th>busy</th><th>idle</th><th>CPU avg</th><th>GPU avg</th></tr>$rows</table>
<script type="application/json" id="timeline-data">$data</script>
</body></html>
""")


def _band(label: str, text_y: float, y: float, height: float, fill: str) -> list[str]:
    """A lane's label and background."""
    return [
        f'<text x="4" y="{text_y}" class="lane">{label}</text>',
        f'<rect x="{_LEFT}" y="{y + 3}" width="{_PLOT_W}" height="{height}" fill="{fill}"/>',
    ]


def _tip(text: str) -> str:
    return f"<title>{html.escape(text)}</title>"


def _util_lane(tl: Any, r: int, y: float, x: Any) -> list[str]:
    """Rank ``r``'s CPU and GPU utilization as polylines in a lane at ``y`` (0 % at its bottom;
    its top is 100 % or the highest CPU reading, whichever is more)."""
    mine = [u for u in tl.samples if u.rank == r]
    top, h = max([100.0, *(u.cpu_pct or 0.0 for u in mine)]), _UTIL_H - 6
    parts = _band(f"util {r}", y + 20, y, h, "#fafafb")
    for key in ("cpu", "gpu"):
        pts = [(u.t, v) for u in mine if (v := getattr(u, f"{key}_pct")) is not None]
        if pts:
            coords = " ".join(f"{x(t):.2f},{y + 3 + h - h * v / top:.2f}" for t, v in pts)
            values = [v for _, v in pts]
            tip = f"rank {r} {key.upper()} %: {len(pts)} samples, mean "
            tip += f"{sum(values) / len(values):.0f} %, max {max(values):.0f} %"
            parts.append(
                f'<polyline class="util {key}" points="{coords}" fill="none" stroke="'
                f'{UTIL_COLORS[key]}" stroke-width="1.5">{_tip(tip)}</polyline>'
            )
    return parts


def _svg(tl: Any, total: float, title: str) -> str:
    """The lanes (a span lane per rank, a utilization lane under each sampled one), the event
    markers and the time axis."""

    def x(t: float) -> float:
        return _LEFT + _PLOT_W * t / total

    top = y = 24
    parts: list[str] = []
    sampled = {u.rank for u in tl.samples}
    for r in tl.ranks or [0]:
        parts += _band(f"rank {r}", y + 17, y, _LANE_H - 6, "#f4f5f7")
        for s in (s for s in tl.spans if s.rank == r):
            w = max(x(s.end_s) - x(s.start_s), 0.5)
            tip = (
                f"rank {r} {s.kind} {s.start_s:.3f}-{s.end_s:.3f} s ({1000 * s.duration_s:.1f} ms)"
            )
            parts.append(
                f'<rect class="{s.kind}" x="{x(s.start_s):.2f}" y="{y + 3}" width="{w:.2f}" '
                f'height="{_LANE_H - 6}" fill="{COLORS[s.kind]}">{_tip(tip)}</rect>'
            )
        y += _LANE_H
        if r in sampled:
            parts += _util_lane(tl, r, y, x)
            y += _UTIL_H
    for e in (e for e in tl.events if e.kind in MARKED):
        color = "#7a3db8" if e.kind == "anchor_changed" else "#444"
        tip = f"{e.kind} at {e.t:.3f} s {json.dumps(e.fields, sort_keys=True)}"
        parts.append(
            f'<line class="event {e.kind}" x1="{x(e.t):.2f}" x2="{x(e.t):.2f}" y1="{top - 4}" '
            f'y2="{y}" stroke="{color}" stroke-dasharray="3,2">{_tip(tip)}</line>'
        )
    for t in (total * k / 5 for k in range(6)):
        parts.append(
            f'<text x="{x(t):.2f}" y="{y + 18}" class="tick" text-anchor="middle">{t:.2f} s</text>'
        )
    head = f'<svg viewBox="0 0 {_WIDTH} {y + 30}" width="100%" role="img" aria-label="{title}">'
    return head + "".join(parts) + "</svg>"


def render_html(tl: Any, title: str) -> str:
    """The page :meth:`Timeline.save_html` writes."""
    summary = tl.summary()
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
    sampled = [(f"{k.upper()} %", c) for k, c in UTIL_COLORS.items() if tl.samples]
    legend = " ".join(
        f'<span class="key"><i style="background:{c}"></i>{k}</span>'
        for k, c in [*COLORS.items(), *sampled]
    )
    title = html.escape(title)
    return _PAGE.substitute(
        title=title,
        facts=html.escape(facts),
        legend=legend,
        svg=_svg(tl, summary["total_s"] or 1.0, title),
        rows=rows,
        data=json.dumps(tl.to_dict(), allow_nan=False).replace("</", "<\\/"),
    )


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


def _event(
    ph: str, name: str, rank: int, args: Any, cat: str = "", t: float = 0.0, **more: Any
) -> dict[str, Any]:
    """One Trace Event on ``rank``'s process and thread (timed unless metadata: ``ph == "M"``)."""
    pid = trace_pid(rank)
    ev = {"name": name, "ph": ph, "pid": pid, "tid": pid, **more, "args": args}
    return ev if ph == "M" else {**ev, "cat": cat, "ts": round(t * 1e6, 3)}


def chrome_trace(tl: Any, version: int) -> dict[str, Any]:
    """The timeline in the Trace Event Format (the JSON ``chrome://tracing`` and Perfetto open).

    One process per rank (``pid = tid = rank + 1``, named ``rank N``, sorted by rank): its spans
    are complete events (``ph: "X"``, ``cat`` and ``name`` the span kind), events carrying an int
    ``rank`` field are instants on that rank's thread (``ph: "i"``, ``s: "t"``), other events are
    global instants (``s: "g"``), and utilization samples are counter tracks ``CPU`` and ``GPU``
    of the rank's process (``ph: "C"``, one series ``%``). Timestamps are microseconds since the
    run's start; ``otherData`` holds that start (``origin_unix_s``) and the format ``version``.
    """
    meta: list[dict[str, Any]] = []
    for r in tl.ranks:
        name = {"name": f"rank {r}"}
        meta += [
            _event("M", "process_name", r, name),
            _event("M", "process_sort_index", r, {"sort_index": r}),
            _event("M", "thread_name", r, name),
        ]
    timed = []
    for s in tl.spans:
        dur, cname = round(s.duration_s * 1e6, 3), TRACE_COLORS[s.kind]
        timed.append(_event("X", s.kind, s.rank, {}, s.kind, s.start_s, dur=dur, cname=cname))
    ranks = set(tl.ranks)
    for e in tl.events:
        rank = e.fields.get("rank")
        on_rank = isinstance(rank, int) and not isinstance(rank, bool) and rank in ranks
        where, s = (rank, "t") if on_rank else (min(ranks, default=0), "g")
        timed.append(_event("i", e.kind, where, dict(e.fields), "event", e.t, s=s))
    for u in tl.samples:
        for name, v in (("CPU", u.cpu_pct), ("GPU", u.gpu_pct)):
            if v is not None:
                timed.append(_event("C", name, u.rank, {"%": round(v, 3)}, "utilization", u.t))
    timed.sort(key=lambda ev: ev["ts"])
    other = {"generator": "flodl-ddp Timeline", "version": version, "origin_unix_s": tl.origin}
    return {"traceEvents": meta + timed, "displayTimeUnit": "ms", "otherData": other}
