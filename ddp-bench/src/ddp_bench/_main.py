"""What an invocation does once its arguments are checked: train, report, save or validate."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from flodl_core import FlodlError

from ._baseline import checked, compare, load_baseline, save_baseline
from ._config import BenchConfig
from ._files import write_text_atomic
from ._record import RunRecord, load_records, save_record
from ._report import render
from ._sweep import point_folder, render_sweep


def _err(message: str, hint: str) -> int:
    print(f"ddp-bench: error: {message}\nhint: {hint}", file=sys.stderr)
    return 2


def _train(cfg: BenchConfig) -> list[RunRecord]:
    from ._hardware import hardware
    from ._runner import run_one

    hw = hardware()
    records = []
    t0 = time.perf_counter()
    n_runs = 0
    for model in cfg.models:
        # Rounds of every mode, not each mode's repeats back to back: the machine's drift over
        # the rounds then reaches every mode alike.
        cells: dict[str, list[RunRecord]] = {mode: [] for mode in cfg.modes}
        for seed in range(cfg.seed, cfg.seed + cfg.seeds):
            for _ in range(cfg.repeats):
                for mode in cfg.modes:
                    cells[mode].append(run_one(cfg.with_(seed=seed), model, mode, hw))
                    n_runs += 1
        records.extend(_keep_last(cfg, model, runs) for runs in cells.values())
    print(f"ddp-bench: {n_runs} run(s) in {time.perf_counter() - t0:.0f}s under {cfg.output}")
    return records


def _keep_last(cfg: BenchConfig, model: str, runs: list[RunRecord]) -> RunRecord:
    """A cell's record: its last run, carrying every complete run's training time, seed and
    final eval when the cell ran more than once (rewritten in place, so ``--report`` on the
    saved runs sees them too)."""
    last = runs[-1]
    if len(runs) > 1:
        done = [r for r in runs if r.status == "complete"]
        last.repeat_train_s = [r.train_s for r in done]
        last.repeat_seeds = [r.seed for r in done]
        last.repeat_evals = [r.final_eval for r in done]
        last.repeat_losses = [r.final_loss for r in done]
        save_record(last, cfg.output / model / last.mode)
    return last


def _saved(cfg: BenchConfig) -> list[RunRecord]:
    """The saved runs under ``--output`` of the chosen models and modes (default: all)."""
    return [r for r in load_records(cfg.output) if r.model in cfg.models and r.mode in cfg.modes]


def sweep_points(cfg: BenchConfig) -> list[BenchConfig]:
    """One config per factor of a slow-factor sweep: the last device slowed that many times
    (none at 1), its runs under ``<output>/slow-<F>/``, its own report there."""
    last = len(cfg.devices) - 1
    return [
        cfg.with_(
            output=cfg.output / point_folder(f),
            slowdown={last: f} if f > 1.0 else {},
            slow_factor=f,
            sweep_factors=(),
            report=str(cfg.output / point_folder(f) / "report.md"),
        )
        for f in cfg.sweep_factors
    ]


def _records(cfg: BenchConfig) -> list[RunRecord]:
    """Train (or load the saved runs of) every point of a sweep, or the one invocation."""
    points = sweep_points(cfg) if cfg.sweep_factors else [cfg]
    out: list[RunRecord] = []
    for point in points:
        records = _train(point) if cfg.train else _saved(point)
        if cfg.sweep_factors and records and point.report is not None:
            path = write_text_atomic(Path(point.report), render(records))
            print(f"ddp-bench: slow factor {point.slow_factor:g}: report written to {path}")
        out += records
    return out


def _write_report(cfg: BenchConfig, records: list[RunRecord]) -> None:
    text = render_sweep(records) if cfg.sweep_factors else render(records)
    if cfg.report == "-":
        sys.stdout.write(text)
    elif cfg.report is not None:
        path = write_text_atomic(Path(cfg.report), text)
        print(f"ddp-bench: report written to {path}")


def _validate(cfg: BenchConfig, records: list[RunRecord], baseline: dict) -> int:
    """Compare with the baseline: 1 on a regression, 2 when nothing could be compared."""
    regressions, notes = compare(records, baseline, cfg.tolerance)
    for n in notes:
        print(f"ddp-bench: {n}")
    for reg in regressions:
        print(reg, file=sys.stderr)
    if regressions:
        return 1
    n = checked(records, baseline)
    if not n:
        return _err(
            f"none of the {len(records)} run(s) could be compared with {cfg.baseline} "
            "(see the notes above)",
            "run the sweep the baseline was made from (python -m ddp_bench validate), or "
            "save a baseline of your own with --save-baseline",
        )
    print(f"ddp-bench: {n} run(s) within {cfg.tolerance:.0%} of the baseline")
    return 0


def execute(cfg: BenchConfig) -> int:
    """Run what ``cfg`` asks; 0 on success, 1 on a failed run or a regression, 2 on bad input."""
    baseline: dict = {}
    if cfg.validate:  # before training: a missing baseline is known at once, not after an hour
        try:
            baseline = load_baseline(cfg.baseline)
        except FlodlError as e:
            return _err(str(e), "python -m ddp_bench --save-baseline writes one from saved runs")
    if cfg.train:  # before training, as the baseline: not after the first model's hour
        try:
            cfg.output.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return _err(f"--output {cfg.output}: cannot create it ({e.strerror})",
                        "point --output at a folder you can write")  # fmt: skip
    try:
        records = _records(cfg)
    except FlodlError as e:
        return _err(str(e), "see python -m ddp_bench --help; --data-dir points at dataset files")
    if not records:
        return _err(
            f"no saved runs under {cfg.output}", "train first, or point --output at a runs folder"
        )
    status = 0 if all(r.status == "complete" for r in records) else 1
    _write_report(cfg, records)
    if cfg.save_baseline:
        try:
            path = save_baseline(records, cfg.baseline)
        except FlodlError as e:
            return _err(str(e), "a baseline needs at least one complete run")
        print(f"ddp-bench: baseline of {len(records)} run(s) saved to {path}")
    if cfg.validate:
        return _validate(cfg, records, baseline) or status
    return status
