"""Epoch-history exports: a self-contained HTML chart page and a CSV table.

The HTML page has no external resources (no CDN, no fonts): the data is baked into the page as
JSON and drawn on ``<canvas>`` by a few lines of inline JavaScript, one small chart per metric so
metrics of different scales stay readable. A ``<table>`` of the same numbers sits under the
charts, so the page is useful with scripts disabled too.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from flodl_core import ConfigError

from ._files import write_text_atomic

__all__ = ["export_trends_csv", "render_plot_html", "write_plot_html"]

_PALETTE = ("#2980b9", "#e67e22", "#27ae60", "#c0392b", "#8e44ad", "#16a085", "#d35400", "#2c3e50")

_SCRIPT = """
(function () {
  const data = JSON.parse(document.getElementById("flodl-data").textContent);
  for (const [i, s] of data.series.entries()) {
    const c = document.getElementById("chart-" + i), g = c.getContext("2d");
    const W = c.width, H = c.height, L = 64, R = 12, T = 12, B = 28;
    const ys = s.values.filter(Number.isFinite);
    if (!ys.length) continue;
    let lo = Math.min(...ys), hi = Math.max(...ys);
    if (hi === lo) { lo -= Math.abs(lo) * 0.05 || 0.5; hi += Math.abs(hi) * 0.05 || 0.5; }
    const n = s.values.length, X = k => L + (n > 1 ? k / (n - 1) : 0.5) * (W - L - R);
    const Y = v => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    g.font = "11px sans-serif"; g.fillStyle = "#555"; g.strokeStyle = "#ddd";
    for (let k = 0; k <= 4; k++) {
      const v = lo + (hi - lo) * k / 4, y = Y(v);
      g.beginPath(); g.moveTo(L, y); g.lineTo(W - R, y); g.stroke();
      g.fillText(v.toPrecision(4), 4, y + 4);
    }
    g.fillText("epoch 1", L, H - 8); g.fillText(String(n), W - R - 20, H - 8);
    g.strokeStyle = s.color; g.lineWidth = 2; g.beginPath();
    let pen = false;
    s.values.forEach((v, k) => {
      if (!Number.isFinite(v)) { pen = false; return; }
      pen ? g.lineTo(X(k), Y(v)) : g.moveTo(X(k), Y(v)); pen = true;
    });
    g.stroke();
    const tip = document.getElementById("tip-" + i);
    c.addEventListener("mousemove", e => {
      const r = c.getBoundingClientRect();
      const k = Math.round((e.clientX - r.left - L) / (W - L - R) * (n - 1));
      if (k >= 0 && k < n) tip.textContent = "epoch " + (k + 1) + ": " + s.values[k];
    });
  }
})();
"""

_STYLE = """
body { font-family: sans-serif; margin: 24px; color: #222; }
.chart { display: inline-block; margin: 8px 16px 16px 0; vertical-align: top; }
.chart h3 { margin: 0 0 4px; font-size: 14px; }
.tip { font-size: 12px; color: #666; height: 16px; }
canvas { border: 1px solid #eee; }
table { border-collapse: collapse; font-size: 12px; margin-top: 16px; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: right; }
"""


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


def render_plot_html(series: Mapping[str, Sequence[float]], title: str = "Training trends") -> str:
    """A standalone HTML page charting each named series (values per epoch)."""
    payload = {
        "title": title,
        "series": [
            {
                "name": name,
                "color": _PALETTE[i % len(_PALETTE)],
                # JSON has no NaN/inf: non-finite points become gaps in the line.
                "values": [_finite_or_none(float(v)) for v in vals],
            }
            for i, (name, vals) in enumerate(series.items())
        ],
    }
    # "</" inside a <script> block would end it early; JSON allows the escaped form.
    data = json.dumps(payload).replace("</", "<\\/")
    charts = "\n".join(
        f'<div class="chart"><h3>{escape(name)}</h3>'
        f'<canvas id="chart-{i}" width="420" height="220"></canvas>'
        f'<div class="tip" id="tip-{i}"></div></div>'
        for i, name in enumerate(series)
    )
    n_rows = max((len(v) for v in series.values()), default=0)
    head = "".join(f"<th>{escape(name)}</th>" for name in series)
    rows = "\n".join(
        "<tr><td>{}</td>{}</tr>".format(
            r + 1,
            "".join(
                f"<td>{float(v[r]):.6g}</td>" if r < len(v) else "<td></td>"
                for v in series.values()
            ),
        )
        for r in range(n_rows)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>{escape(title)}</h1>\n{charts}\n"
        f"<table><thead><tr><th>epoch</th>{head}</tr></thead><tbody>\n{rows}\n</tbody></table>\n"
        f'<script type="application/json" id="flodl-data">{data}</script>\n'
        f"<script>{_SCRIPT}</script>\n</body></html>\n"
    )


def write_plot_html(
    path: str | os.PathLike[str],
    series: Mapping[str, Sequence[float]],
    title: str = "Training trends",
) -> Path:
    """Render :func:`render_plot_html` and write it atomically to ``path``."""
    return write_text_atomic(path, render_plot_html(series, title))


def export_trends_csv(path: str | os.PathLike[str], series: Mapping[str, Sequence[float]]) -> Path:
    """One column per series, one row per epoch (``epoch`` first, 1-based).

    Shorter series (a metric that started later) leave their trailing cells empty.
    """
    names = list(series)
    for name in names:
        if any(ch in name for ch in ',"\n\r'):
            # Tags are identifiers; quoting rules are not worth carrying for them.
            raise ConfigError(
                f'metric name {name!r} cannot be a CSV column (contains , " or newline)'
            )
    n_rows = max((len(v) for v in series.values()), default=0)
    lines = [",".join(["epoch", *names])]
    for r in range(n_rows):
        cells = [repr(float(series[n][r])) if r < len(series[n]) else "" for n in names]
        lines.append(",".join([str(r + 1), *cells]))
    return write_text_atomic(path, "\n".join(lines) + "\n")
