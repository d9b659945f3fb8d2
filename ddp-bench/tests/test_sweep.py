"""The slow-factor sweep: one pass per factor into its own folder with the right slowdown, and a
report of each mode's speedup against the ideal 1 + 1/F (fake runs: no training)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ddp_bench import RunRecord, render_sweep, save_record
from ddp_bench._cli import parse
from ddp_bench._config import BenchConfig
from ddp_bench._main import execute, sweep_points
from ddp_bench._sweep import point_folder

SOLO0_S = 10.0


def _time(mode: str, factor: float) -> float:
    """Training seconds of a fake run: solo-0 10 s, solo-1 10 F s, cadence at 90 % of the ideal
    1 + 1/F, async at 80 %."""
    ideal = 1 + 1 / factor
    return {
        "solo-0": SOLO0_S,
        "solo-1": SOLO0_S * factor,
        "cpu-cadence": SOLO0_S / (0.9 * ideal),
        "cpu-async": SOLO0_S / (0.8 * ideal),
    }[mode]


def fake_runs(make_record: Callable[..., RunRecord]) -> Callable[..., RunRecord]:
    def run_one(cfg: BenchConfig, model: str, mode: str, hw: dict[str, Any]) -> RunRecord:
        assert cfg.slow_factor is not None and not cfg.sweep_factors
        r = make_record(model, mode, _time(mode, cfg.slow_factor), [95.0])
        r.slowdown = {str(k): v for k, v in cfg.slowdown.items()}
        r.slow_factor = cfg.slow_factor
        save_record(r, cfg.output / model / mode)
        return r

    return run_one


def test_sweep_points_slow_the_last_device(tmp_path: Path) -> None:
    c = parse(["--slow-factors", "1,4,2.5", "--output", str(tmp_path)], detect=False)
    assert c is not None
    points = sweep_points(c)
    assert [p.slow_factor for p in points] == [1.0, 4.0, 2.5]
    assert [p.slowdown for p in points] == [{}, {1: 4.0}, {1: 2.5}]
    assert [p.output for p in points] == [tmp_path / "slow-1", tmp_path / "slow-4",
                                          tmp_path / "slow-2.5"]  # fmt: skip
    assert all(p.sweep_factors == () for p in points) and point_folder(16.0) == "slow-16"


def test_sweep_trains_each_factor_and_reports(
    make_record: Callable[..., RunRecord], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import ddp_bench._hardware as hardware
    import ddp_bench._runner as runner

    monkeypatch.setattr(runner, "run_one", fake_runs(make_record))
    monkeypatch.setattr(hardware, "hardware", lambda: {"host": "bench"})
    out = tmp_path / "runs"
    argv = ["hetero-sweep", "--slow-factors", "1,2,8", "--model", "mlp", "--output", str(out)]
    c = parse(argv, detect=False)
    assert c is not None and execute(c) == 0
    for f in ("1", "2", "8"):
        assert (out / f"slow-{f}" / "mlp" / "cpu-async" / "run.json").is_file()
        assert (out / f"slow-{f}" / "report.md").read_text().startswith("# ddp-bench report")
    text = (out / "report.md").read_text()
    assert text.startswith("# ddp-bench slow-factor sweep")
    assert "| Factor | Ideal | Pair alone | cpu-cadence | of ideal | cpu-async | of ideal |" in text
    # F = 2: ideal 1.5, pair alone 1 + 10 / 20 = 1.5, cadence 0.9 x 1.5 = 1.35x (90 %)
    assert "| 2 | 1.50x | 1.50x | 1.35x | 90% | 1.20x | 80% | 10.0 |" in text
    assert "| 1 | 2.00x | 2.00x | 1.80x | 90% | 1.60x | 80% | 10.0 |" in text
    assert "| 8 | 1.12x | 1.12x | 1.01x | 90% | 0.90x | 80% | 10.0 |" in text
    assert "Too short" not in text
    # every two-rank run measures [900, 450] samples/s against 1000 and 500 alone: together
    # 0.90, engine = speedup / (1.5 x 0.90): 1.35x -> 1.00, 1.20x -> 0.89
    parts = text.split("Ranks together and engine")[1].split("Δ eval")[0]
    assert "| Factor | cpu-cadence together | cpu-cadence engine | cpu-async together |" in parts
    assert "| 2 | 0.90 | 1.00 | 0.90 | 0.89 |" in parts
    # the saved sweep reports again without training
    monkeypatch.setattr(runner, "run_one", None)
    again = parse(["--slow-factors", "1,2,8", "--output", str(out), "--report", "-"],
                  detect=False)  # fmt: skip
    assert again is not None and not again.train and execute(again) == 0


def test_render_sweep_eval_gaps_short_runs_and_missing_cells(
    make_record: Callable[..., RunRecord],
) -> None:
    records = []
    for f, evals in ((1.0, (95.0, 94.5)), (4.0, (95.0, 96.0))):
        for mode, ev in (("solo-0", evals[0]), ("cpu-cadence", evals[1])):
            r = make_record("lenet", mode, _time(mode, f) / 10, [ev])  # 1 s solo: short
            r.slow_factor = f
            records.append(r)
    stray = make_record("mlp", "solo-0", 1.0, [90.0])  # not part of a sweep: left out
    text = render_sweep([*records, stray])
    assert "## lenet" in text and "## mlp" not in text
    # no solo-1: pair alone unknown; F = 4: ideal 1.25, cadence 1.125x *(short)*
    assert "| 4 | 1.25x | — | 1.12x *(short)* | 90% | 1.0 |" in text
    assert "**Too short to time**: 4 run(s)" in text
    assert "| 4 | — | — |" in text  # no solo-1: no breakdown
    gaps = text.split("Δ eval vs solo-0:")[1]
    assert "| 1 | 95.0000 | -0.50 pp |" in gaps and "| 4 | 95.0000 | +1.00 pp |" in gaps
    assert re.search(r"ideal\*\* speedup over solo-0 is 1 \+ 1/F", text)
    assert render_sweep([]).endswith("No run of a slow-factor sweep.\n")
