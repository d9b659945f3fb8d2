"""What one bench invocation does, and the named presets."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from flodl_ddp import MODES

from ._cells import BENCH_MODES
from .models import MODEL_NAMES

BENCH_ROOT = Path(__file__).resolve().parents[2]
"""The ``ddp-bench`` folder of the source tree (the bench is only ever installed editable)."""


@dataclass(frozen=True)
class BenchConfig:
    """A resolved command line. ``train`` is False when only saved runs are reported or checked.

    ``seeds`` > 1 runs rounds on the consecutive seeds ``seed, seed + 1, ...`` (``repeats``
    rounds on each), so that evals are compared with solo-0's seed by seed.

    ``bind_cores``: CPU ranks of a multi-rank run are bound to their own cores (where the
    platform can and there are enough; ``--no-bind-cores`` leaves the placement to the OS).

    ``slowdown`` maps a rank to a factor >= 1 (that rank's batches take ``factor`` times as long:
    a slower device simulated on identical hardware); for ``solo-N`` the factor of rank N applies.

    ``sweep_factors`` (non-empty: a slow-factor sweep) runs everything once per factor F, the
    last device slowed F times (1: not slowed), into ``<output>/slow-<F>/``; ``slow_factor`` is
    the sweep point a single pass belongs to (recorded in its runs).
    """

    models: tuple[str, ...] = MODEL_NAMES
    modes: tuple[str, ...] = ("solo-0", "solo-1", *BENCH_MODES)
    devices: tuple[str, ...] = ("cpu", "cpu")
    epochs: int | None = None
    batches: int | None = None
    batch_size: int | None = None
    lr_scale: float = 1.0
    seed: int = 42
    output: Path = Path("runs")
    data_dir: Path = Path("data")
    monitor: int | None = None
    report: str | None = None
    validate: bool = False
    save_baseline: bool = False
    baseline: Path = Path("baselines/baseline.json")
    tolerance: float = 0.15
    repeats: int = 1
    seeds: int = 1
    bind_cores: bool = True
    slowdown: dict[int, float] = field(default_factory=dict)
    sweep_factors: tuple[float, ...] = ()
    slow_factor: float | None = None
    train: bool = True
    preset: str | None = None

    def with_(self, **changes: Any) -> BenchConfig:
        return replace(self, **changes)


def _cpu_2rank(name: str) -> dict[str, Any]:
    """The committed CPU comparison: its runs under ``runs/<name>``, its report in the bench."""
    return {
        "models": ("logistic", "mlp", "lenet"),
        # solo and flodl-ddp's six modes, as in its committed report (not the outer-optimizer
        # cells added to the mode list later)
        "modes": ("solo-0", "solo-1", *MODES),
        "devices": ("cpu", "cpu"),
        "slowdown": {1: 2.0},
        # Five seeds, one round each: medians of five runs for the speedups, and an eval gap to
        # solo-0 averaged over five seeds (one seed's gap on 1,000 held-out images swings by
        # more than the 0.5 pp the comparison is after).
        "seeds": 5,
        "output": Path("runs") / name,
        "report": str(BENCH_ROOT / "reports" / f"{name}.md"),
    }


PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "models": ("mlp",),
        "modes": ("solo-0", "solo-1", "cpu-cadence", "cpu-async"),
        "epochs": 2,
        "batches": 100,
        "slowdown": {1: 2.0},
        "report": "@output/report.md",
    },
    "full-sweep": {"report": "@output/report.md"},
    "validate": {
        # About 5 minutes on 2 CPU cores (81 runs): the three MNIST models of the offline
        # subset, every cell, three seeds (the baseline holds each cell's eval and final loss
        # averaged over them: one seed's cadence run moves with the machine's timing).
        "models": ("logistic", "mlp", "lenet"),
        "devices": ("cpu", "cpu"),
        "slowdown": {1: 2.0},
        "seeds": 3,
        "validate": True,
        "baseline": BENCH_ROOT / "baselines" / "cpu-validate.json",
        "output": Path("runs") / "validate",
        "report": "@output/report.md",
    },
    "hetero-sweep": {
        # The speedup against the ideal 1 + 1/F as rank 1 gets slower. 40 epochs keep every
        # training time above the report's 2 s "too short" mark on a 2-core VM: mlp's 30 took
        # 3.5 s alone and 2.6 s as a pair slowed 2x (reports/cpu-2rank-long.md), and equal
        # ranks (F = 1) train up to twice as fast.
        "models": ("mlp", "lenet"),
        "modes": ("solo-0", "solo-1", "cpu-cadence", "cpu-async"),
        "devices": ("cpu", "cpu"),
        "epochs": 40,
        "sweep_factors": (1.0, 2.0, 4.0, 8.0, 16.0),
        "output": Path("runs") / "hetero-sweep",
        "report": "@output/report.md",
    },
    "report": {"train": False, "report": "@output/report.md"},
    "cpu-2rank": _cpu_2rank("cpu-2rank"),
    "cpu-2rank-long": {**_cpu_2rank("cpu-2rank-long"), "epochs": 30},
}
"""Named sets of options; options given on the command line win over the preset's.

- ``quick``: mlp, solo-0 / solo-1 / cpu-cadence / cpu-async, 2 epochs of 100 batches, rank 1
  slowed 2x, report in ``<output>/report.md`` (a smoke test of the whole harness).
- ``full-sweep``: every model in every mode with its own epochs (README's Models table), then
  the report.
- ``validate``: logistic, mlp and lenet (offline MNIST subset) in every cell on two CPU ranks,
  rank 1 slowed 2x, on three seeds, then the check against the committed baseline
  ``ddp-bench/baselines/cpu-validate.json`` (``validate --save-baseline`` re-creates it). The
  full sweep's ResNets and text models train for hours on a CPU: validate them with
  ``full-sweep --validate --baseline FILE`` against a baseline of your own.
- ``hetero-sweep``: mlp and lenet, solo-0 / solo-1 / cpu-cadence / cpu-async at 40 epochs, once
  per slow factor 1, 2, 4, 8, 16 of rank 1 (``--slow-factors``), runs under
  ``<output>/slow-<F>/``; the report gives per model and factor each mode's speedup over solo-0
  against the ideal ``1 + 1/F``.
- ``report``: no training: the report of the runs saved under ``--output``.
- ``cpu-2rank``: logistic, mlp and lenet (MNIST) in solo and all six modes on two CPU ranks,
  rank 1 slowed 2x, one round on each of five seeds (speedups from median times, eval gaps to
  solo-0 averaged over the seeds); the report goes to
  ``ddp-bench/reports/cpu-2rank.md``.
- ``cpu-2rank-long``: the same at 30 epochs (120,000 samples a run, 40 % of the Models table's
  five epochs of full MNIST): the offline subset's five epochs are ~60 batches each, too short
  for a speedup to show through the ranks' first-epoch warm-up; report in
  ``ddp-bench/reports/cpu-2rank-long.md``.
"""

PRESET_HELP = {
    "quick": "mlp, 4 modes, 2x100 batches, rank 1 slowed 2x (smoke test)",
    "full-sweep": "every model in every mode, then the report",
    "validate": "logistic/mlp/lenet, every cell, 3 seeds, then the committed baseline check",
    "hetero-sweep": "mlp/lenet at slow factors 1,2,4,8,16: speedup vs the ideal 1 + 1/F",
    "report": "no training: report the runs saved under --output",
    "cpu-2rank": "logistic/mlp/lenet, solo + six modes, 2 CPU ranks, rank 1 slowed 2x, 5 seeds",
    "cpu-2rank-long": "cpu-2rank at 30 epochs (past the ranks' first-epoch warm-up)",
}
