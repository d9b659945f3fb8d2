"""Baselines: the final eval and loss of each (model, mode), saved once and checked later with a
relative tolerance. Wall times are recorded for reference but not checked (too noisy to gate).

Each entry also keeps how its run was made (epochs, batch cap and size, seeds, devices, slowdown,
data): a run made otherwise is not compared with it (a note says why), and a check that could
compare nothing fails instead of passing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flodl_core import DataError

from ._files import write_text_atomic
from ._record import RunRecord

FORMAT = "ddp-bench-baseline/1"


@dataclass(frozen=True)
class Regression:
    """``metric`` of ``model`` / ``mode`` moved the wrong way by more than the tolerance."""

    model: str
    mode: str
    metric: str
    baseline: float
    current: float
    tolerance: float

    def __str__(self) -> str:
        change = (self.current - self.baseline) / abs(self.baseline) if self.baseline else 0.0
        return (
            f"REGRESSION {self.model} / {self.mode} / {self.metric}: {self.current:.6g} vs "
            f"baseline {self.baseline:.6g} ({change:+.1%}, tolerance {self.tolerance:.0%})"
        )


def run_setup(r: RunRecord) -> dict[str, Any]:
    """What makes two runs of a cell comparable: a baseline entry keeps it (``setup``)."""
    return {
        "epochs": r.epochs_planned,
        "batches_per_epoch": r.batches_per_epoch,
        "batch_size": r.batch_size,
        "seeds": sorted(set(r.repeat_seeds or [r.seed])),
        "devices": list(r.devices),
        "slowdown": {str(k): float(v) for k, v in sorted(r.slowdown.items())},
        "data_source": r.data_source,
    }


def mismatch(r: RunRecord, entry: dict[str, Any]) -> str | None:
    """``None`` when ``r`` was made as the baseline ``entry``'s run was (entries without a
    setup, from older baselines, match anything), else what differs."""
    base = entry.get("setup")
    if base is None:
        return None
    mine = run_setup(r)
    diff = [f"{k} {mine[k]!r} vs {base.get(k)!r}" for k in mine if mine[k] != base.get(k)]
    return "; ".join(diff) or None


def checked(records: list[RunRecord], baseline: dict[str, Any]) -> int:
    """How many complete runs of ``records`` have a comparable baseline entry."""
    entries = baseline.get("entries", {})
    return sum(
        1
        for r in records
        if r.status == "complete"
        and f"{r.model}/{r.mode}" in entries
        and mismatch(r, entries[f"{r.model}/{r.mode}"]) is None
    )


def baseline_of(records: list[RunRecord]) -> dict[str, Any]:
    """The baseline document of the complete runs among ``records``."""
    entries: dict[str, Any] = {}
    for r in records:
        if r.status != "complete":
            continue
        entries[f"{r.model}/{r.mode}"] = {
            "eval": r.eval_mean,
            "eval_name": r.eval_name,
            "higher_is_better": r.higher_is_better,
            "loss": r.loss_mean,
            "total_s": r.total_s,
            "synthetic": r.synthetic,
            "data_source": r.data_source,
            "setup": run_setup(r),
        }
    return {"format": FORMAT, "entries": entries}


def save_baseline(records: list[RunRecord], path: Path) -> Path:
    doc = baseline_of(records)
    if not doc["entries"]:
        raise DataError(f"no complete run to save as a baseline in {path}")
    return write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")


def load_baseline(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text("utf-8"))
    except FileNotFoundError:
        raise DataError(
            f"baseline {path} does not exist; save one first with --save-baseline"
        ) from None
    except (OSError, ValueError) as e:
        raise DataError(f"baseline {path}: cannot read it ({e})") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise DataError(f"baseline {path}: not a {FORMAT} file")
    return doc


def _worse(higher_is_better: bool, current: float, base: float, tol: float) -> bool:
    if higher_is_better:
        return current < base - tol * abs(base)
    return current > base + tol * abs(base)


def compare(
    records: list[RunRecord], baseline: dict[str, Any], tolerance: float
) -> tuple[list[Regression], list[str]]:
    """Regressions of ``records`` against ``baseline``, and notes (runs without a baseline entry,
    incomplete runs). Eval regresses when it drops (accuracy) or rises (CE, MSE) by more than
    ``tolerance`` relative to the baseline (a cell run on several ``--seeds``: the mean over
    them); the final loss (the same mean) when it rises by more. A run made otherwise than the
    entry's (:func:`mismatch`) is a note, not a check."""
    regressions: list[Regression] = []
    notes: list[str] = []
    entries = baseline.get("entries", {})
    for r in records:
        key = f"{r.model}/{r.mode}"
        base = entries.get(key)
        if r.status != "complete":
            regressions.append(Regression(r.model, r.mode, "completion", 1.0, 0.0, tolerance))
            continue
        if base is None:
            notes.append(f"{key}: no baseline entry, not checked")
            continue
        why = mismatch(r, base)
        if why is not None:
            notes.append(f"{key}: made otherwise than the baseline's run, not checked ({why})")
            continue
        ev, b_ev = r.eval_mean, base.get("eval")
        if ev is not None and b_ev is not None and _worse(r.higher_is_better, ev, b_ev, tolerance):
            regressions.append(Regression(r.model, r.mode, r.eval_name, b_ev, ev, tolerance))
        loss, b_loss = r.loss_mean, base.get("loss")
        if loss is not None and b_loss is not None and _worse(False, loss, b_loss, tolerance):
            regressions.append(Regression(r.model, r.mode, "loss", b_loss, loss, tolerance))
    return regressions, notes
