"""The sync step-time benchmark still runs (tiny sizes: this checks it works, it measures
nothing), and its arguments are checked."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "ddp_sync_step.py"


@pytest.mark.multiprocess
def test_ddp_sync_step_runs(run_script: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    proc = run_script(
        SCRIPT, *("--rounds", "3", "--samples", "256", "--width", "16", "--batch", "32"),
        timeout=300,
    )  # fmt: skip
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("flodl ddp_sync_step: 2 CPU ranks")
    assert "4 steps per rank per epoch, 3 rounds" in lines[0]  # 256 / 2 ranks / 32
    names = ("torch DDP", "flodl nccl-sync", "flodl cpu-sync")
    rows = {n: line[len(n) :].split() for line in lines[2:-1] for n in names if line.startswith(n)}
    assert set(rows) == set(names)
    for name in names[1:]:
        ratio = float(rows[name][2].rstrip("x"))  # epoch (ms), step (ms), vs torch DDP, ...
        assert 0.2 < ratio < 5.0, rows[name]  # a ratio of two epoch times, not a placeholder
    assert lines[-1].startswith("goal: flodl sync's step time <= 1.03x")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--modes", "cpu-cadence"), "--modes takes sync modes"),
        (("--rounds", "0"), "--rounds must be >= 1"),
        (("--width", "0"), "--width must be >= 1"),
        (("--batch", "0"), "--batch must be >= 1"),
        (("--modes", ","), "--modes names no mode"),
        (("--slow", "0.5"), "--slow must be >= 1"),
        (("--samples", "10", "--batch", "64"), "less than one batch"),
    ],
)
def test_bad_arguments_are_named(args: tuple[str, ...], message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert message in proc.stderr


def test_every_contender_leads_equally_often() -> None:
    sys.path.insert(0, str(HERE))
    try:
        from ddp_sync_step import rotate
    finally:
        sys.path.remove(str(HERE))
    names = ["torch DDP", "flodl nccl-sync", "flodl cpu-sync"]
    orders = [rotate(names, r) for r in range(6)]
    assert all(sorted(o) == sorted(names) for o in orders)
    for position in range(3):
        firsts = [o[position] for o in orders]
        assert {n: firsts.count(n) for n in names} == dict.fromkeys(names, 2)
