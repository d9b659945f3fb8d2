"""Files a run leaves behind: the offline HTML page, CSV, the text log. All written atomically."""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flodl_core import atomic_write

from ._format import format_eta, format_metric

if TYPE_CHECKING:
    from ._monitor import EpochRecord

_MARK = "<!--FLODL_BOOT-->"
_TITLE = "<title>flodl Training Monitor</title>"


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` with :func:`flodl_core.atomic_write`, creating its folder."""
    return atomic_write(path, text, parents=True)


def template() -> str:
    """The dashboard page, one file of HTML with inline CSS and JS."""
    return resources.files("flodl_monitor").joinpath("static/dashboard.html").read_text("utf-8")


def script_json(obj: Any) -> str:
    """JSON safe inside ``<script>``: no ``</script>``, no ``<!--``, no JS line separators."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_page(boot: dict[str, Any], *, title: str | None = None) -> str:
    """The page with ``window.FLODL_BOOT = boot`` injected (live config or baked archive data)."""
    page = template()
    if title is not None:
        page = page.replace(_TITLE, f"<title>{title}</title>", 1)
    return page.replace(_MARK, f"<script>window.FLODL_BOOT={script_json(boot)};</script>", 1)


def csv_text(epochs: Sequence[EpochRecord]) -> str:
    """``epoch,duration_s,<metrics>,cpu_pct,ram_used,gpu_pct,vram_alloc,vram_spill``.

    Metric columns are the union of every epoch's names in first-seen order and each value goes
    under its own name (empty when an epoch lacks it); unavailable resources are empty cells.
    """
    names: dict[str, None] = {}
    for e in epochs:
        names.update(dict.fromkeys(e.metrics))
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(
        [
            "epoch",
            "duration_s",
            *names,
            "cpu_pct",
            "ram_used",
            "gpu_pct",
            "vram_alloc",
            "vram_spill",
        ]
    )
    for e in epochs:
        r = e.resources
        spill = None
        if r.vram_alloc is not None:
            spill = max(0, r.vram_alloc - r.vram_total) if r.vram_total is not None else 0
        w.writerow(
            [
                e.epoch + 1,
                f"{e.duration:.3f}",
                *(_cell8(e.metrics.get(n)) for n in names),
                "" if r.cpu is None else f"{r.cpu:.1f}",
                _cell(r.ram_used),
                "" if r.gpu is None else f"{r.gpu:.1f}",
                _cell(r.vram_alloc),
                _cell(spill),
            ]
        )
    return out.getvalue()


def _cell(v: int | None) -> str:
    return "" if v is None else str(v)


def _cell8(v: float | None) -> str:
    return "" if v is None else f"{v:.8f}"


def log_text(epochs: Sequence[EpochRecord], total: int, total_seconds: float) -> str:
    """``# flodl training log``, ``epoch {e}/{T}  k=v ...  [dur]`` lines, ``# total: {t}``."""
    lines = ["# flodl training log"]
    for e in epochs:
        kv = "  ".join(f"{k}={format_metric(v)}" for k, v in e.metrics.items())
        lines.append(f"epoch {e.epoch + 1}/{total}  {kv}  [{format_eta(e.duration)}]")
    lines.append(f"# total: {format_eta(total_seconds)}")
    return "\n".join(lines) + "\n"
