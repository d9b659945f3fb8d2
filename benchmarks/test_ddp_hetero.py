"""The heterogeneous DDP benchmark still runs (tiny sizes: this checks it works, it measures
nothing)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

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
