"""Earlier artifacts of a run folder are renamed with their timestamp, never overwritten."""

from __future__ import annotations

import datetime
from pathlib import Path

ARTIFACTS = (
    "run.json",
    "training.log",
    "trace.json",
    "timeline.json",
    "timeline.csv",
    "timeline.html",
    "dashboard.html",
)


def rotate(folder: Path) -> list[Path]:
    """Rename each existing artifact ``name.ext`` to ``name.<YYYYmmdd-HHMMSS>.ext`` (the time of
    the earlier run, from ``run.json`` or the file itself; ``-2``, ``-3`` on a clash). Returns the
    new paths."""
    if not folder.is_dir():
        return []
    present = [folder / a for a in ARTIFACTS if (folder / a).is_file()]
    if not present:
        return []
    anchor = folder / "run.json" if (folder / "run.json").is_file() else present[0]
    stamp = datetime.datetime.fromtimestamp(anchor.stat().st_mtime).strftime("%Y%m%d-%H%M%S")
    suffix = stamp
    k = 1
    while any((folder / f"{p.stem}.{suffix}{p.suffix}").exists() for p in present):
        k += 1
        suffix = f"{stamp}-{k}"
    moved = []
    for p in present:
        target = folder / f"{p.stem}.{suffix}{p.suffix}"
        p.rename(target)
        moved.append(target)
    return moved
