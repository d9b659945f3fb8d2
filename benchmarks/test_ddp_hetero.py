"""The heterogeneous DDP benchmark still runs (tiny sizes: this checks it works, it measures
nothing), and the slow-factor sweep's option, ratio arithmetic and tables, on made-up numbers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.multiprocess
def test_ddp_hetero_runs(run_script: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    proc = run_script(
        HERE / "ddp_hetero.py",
        *("--samples", "512", "--epochs", "1", "--width", "32", "--batch", "32"),
        *("--modes", "cpu-sync,cpu-cadence", "--rounds", "2"),
        timeout=300,
    )
    out = proc.stdout
    assert "flodl ddp_hetero" in out
    for row in ("fast rank alone", "torch DDP per-batch", "flodl cpu-sync", "flodl cpu-cadence"):
        assert row in out
    step = next(line for line in out.splitlines() if line.startswith("step time flodl cpu-sync"))
    assert "against the torch DDP run just before it, 2 round(s)" in step  # paired per round
    header = next(line for line in out.splitlines() if line.startswith("run "))
    assert "vs alone" in header and "vs mean" in header  # both references of the ratio


# ---- the slow-factor sweep: option, arithmetic and tables (no timing) --------------------------


@pytest.fixture(scope="module")
def hetero() -> ModuleType:
    sys.path.insert(0, str(HERE))
    try:
        import ddp_hetero
    finally:
        sys.path.remove(str(HERE))
    return ddp_hetero


def test_parse_factors(hetero: ModuleType) -> None:
    assert hetero.parse_factors("1,2,4,8,16") == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert hetero.parse_factors(" 3 ") == [3.0] and hetero.parse_factors("1.5,1") == [1.5, 1.0]
    for text, message in [
        ("0.5", "below 1"),
        ("2,x", "'x' is not a number"),
        ("2,2", "given twice"),
        (",", "names no factor"),
        ("inf", "not finite"),
        ("nan", "below 1"),
    ]:
        with pytest.raises(ValueError, match=message):
            hetero.parse_factors(text)


def test_sweep_modes(hetero: ModuleType) -> None:
    assert hetero.sweep_modes(None) == ["cpu-cadence", "cpu-async"]
    assert hetero.sweep_modes("nccl_async, cpu-async,cpu-async") == ["nccl-async", "cpu-async"]
    assert "waits for the slow rank" in hetero.sweep_modes("cpu-sync")
    assert "unknown mode 'ring'" in hetero.sweep_modes("ring")
    assert hetero.sweep_modes(" , ") == "--modes names no mode"


def test_ideal_and_ratios(hetero: ModuleType) -> None:
    assert hetero.ideal(1) == 2.0 and hetero.ideal(4) == 1.25 and hetero.ideal(16) == 1.0625
    # each run against the better of the solo runs around it
    assert hetero.against_solo([150.0, 120.0], [100.0, 80.0], [90.0, 100.0]) == [1.5, 1.2]
    # ... and against their mean
    assert hetero.against_mean([150.0, 180.0], [100.0, 80.0], [200.0, 100.0]) == [1.0, 2.0]
    probes = [
        {"alone": [100.0, 50.0], "together": {2.0: [90.0, 45.0], 4.0: [95.0, 40.0]}},
        {"alone": [200.0, 100.0], "together": {2.0: [160.0, 100.0]}},
    ]
    assert hetero.together_ratios(probes, 2.0) == [[0.9, 0.8], [0.9, 1.0]]
    assert hetero.together_ratios(probes, 4.0) == [[0.95], [0.8]]


def _sweep(hetero: ModuleType) -> object:
    """Two rounds at factors 1 and 4, solo throughput 1000 then 1100 (drift) ..."""
    s = hetero.Sweep(factors=[1.0, 4.0], modes=["cpu-cadence", "cpu-async"])
    s.solo = [1000.0, 1000.0, 1100.0, 1100.0, 1000.0]
    s.groups = [1.0, 4.0, 1.0, 4.0]
    s.sps = {
        (1.0, "cpu-cadence"): [1800.0, 1900.0],
        (1.0, "cpu-async"): [1700.0, 1826.0],
        (4.0, "cpu-cadence"): [1200.0, 1375.0],
        (4.0, "cpu-async"): [1100.0, 1100.0],
    }
    for f in s.factors:
        at = [i for i, g in enumerate(s.groups) if g == f]
        for m in s.modes:
            around = [s.solo[i] for i in at], [s.solo[i + 1] for i in at]
            s.ratios[(f, m)] = hetero.against_solo(s.sps[(f, m)], *around)
            s.centred[(f, m)] = hetero.against_mean(s.sps[(f, m)], *around)
            s.notes[(f, m)] = f"note {m}"
    s.losses = {(0.0, "solo"): [0.50, 0.40, 0.45, 0.60]}  # median 0.475
    for m, lo in (("cpu-cadence", [0.38, 0.40]), ("cpu-async", [0.50, 0.55])):
        for f in s.factors:
            s.losses[(f, m)] = lo
    s.probes = [
        {"alone": [100.0, 100.0], "together": {1.0: [90.0, 92.0], 4.0: [98.0, 99.0]}},
        {"alone": [100.0, 100.0], "together": {1.0: [94.0, 96.0], 4.0: [96.0, 97.0]}},
    ]
    return s


def test_factor_table(hetero: ModuleType) -> None:
    s = _sweep(hetero)
    one = hetero.factor_table(s, 1.0)
    assert one[0] == "slow factor 1 (equal ranks): ideal 1 + 1/1 = 2.00x the fast rank alone"
    assert "vs alone" in one[1] and "vs mean" in one[1] and "of ideal" in one[1]
    # solo runs around factor 1's groups: 1000, 1000 (round 1) and 1100, 1100 (round 2)
    assert one[2].startswith("fast rank alone") and "2 runs (1000-1100 samples/s)" in one[2]
    # cadence: 1800 / 1000 = 1.80 and 1900 / 1100 = 1.727: median 1.764, 88 % of 2.0
    cadence = one[3].split()
    assert cadence[:4] == ["flodl", "cpu-cadence", "1850", "1.76x"]
    # the solos around each run are equal here: vs mean = vs alone
    assert cadence[4:9] == ["1.73-1.80", "1.76x", "2.00x", "88%", "0.821"]  # loss 0.39 / 0.475
    assert one[3].endswith("note cpu-cadence") and "loss/solo" in one[1]
    assert one[5].startswith("ranks together vs each alone: fast rank 0.92 (0.90-0.94), slow "
                             "rank 0.94 (0.92-0.96)")  # fmt: skip
    four = hetero.factor_table(s, 4.0)
    assert four[0].startswith("slow factor 4 (rank 1 slowed 4x): ideal 1 + 1/4 = 1.25x")
    # cadence: 1200 / 1100 (the better solo around it) and 1375 / 1100: 1.09, 1.25; median 1.17;
    # against the mean of the solos around each (1050): 1.143 and 1.310, median 1.23
    assert four[3].split()[3:8] == ["1.17x", "1.09-1.25", "1.23x", "1.25x", "94%"]


def test_summary_table(hetero: ModuleType) -> None:
    lines = hetero.summary_table(_sweep(hetero))
    assert lines[0].split() == ["factor", "ideal", "cpu-cadence", "of", "ideal", "loss",
                                "cpu-async", "of", "ideal", "loss", "together"]  # fmt: skip
    # losses: cadence 0.39 / 0.475 = 0.821, async 0.525 / 0.475 = 1.105
    assert lines[1].split() == ["1", "2.00x", "1.76x", "88%", "0.821", "1.68x", "84%", "1.105",
                                "0.92"]  # fmt: skip
    assert lines[2].split() == ["4", "1.25x", "1.17x", "94%", "0.821", "1.00x", "80%", "1.105",
                                "0.97"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--slow-factor", "0.5"), "below 1"),
        (("--slow-factor", "2", "--modes", "cpu-sync"), "waits for the slow rank"),
        (("--slow-factor", "2", "--probe-seconds", "0"), "--probe-seconds must be > 0"),
    ],
)
def test_sweep_bad_arguments_exit_2(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(HERE / "ddp_hetero.py"), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.slow
@pytest.mark.multiprocess
def test_slow_factor_sweep_runs(
    run_script: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    proc = run_script(
        HERE / "ddp_hetero.py",
        *("--samples", "512", "--epochs", "1", "--width", "32", "--batch", "32"),
        *("--slow-factor", "2", "--modes", "cpu-cadence", "--rounds", "1"),
        *("--probe-seconds", "0.2"),
        timeout=300,
    )
    out = proc.stdout
    assert "flodl ddp_hetero slow-factor sweep" in out
    assert "slow factor 2 (rank 1 slowed 2x): ideal 1 + 1/2 = 1.50x" in out
    for row in ("fast rank alone", "flodl cpu-cadence", "ranks together vs each alone"):
        assert row in out
    assert "flodl cpu-async" not in out and "torch DDP" not in out
    last = out.strip().splitlines()[-1].split()
    assert last[:2] == ["2", "1.50x"] and last[3].endswith("%")
