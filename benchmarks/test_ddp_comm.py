"""The communication benchmark still runs (tiny sizes: this checks it works, it measures
nothing)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.multiprocess
def test_ddp_comm_runs(run_script: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    proc = run_script(
        HERE / "ddp_comm.py",
        *("--samples", "512", "--epochs", "1", "--width", "16", "--batch", "32"),
        *("--rows", "solo,sync,cadence,diloco100,diloco500"),
        timeout=600,
    )
    out = proc.stdout
    assert "flodl ddp_comm" in out
    assert "bytes/sample" in out and "2(W-1)/W" in out
    names = ("fast rank alone", "flodl cpu-sync", "flodl cpu-cadence", "DiLoCo() H=100",
             "DiLoCo() H=500")  # fmt: skip
    lines = {n: next(ln for ln in out.splitlines() if ln.startswith(n)) for n in names}
    # columns after the name: samples, averagings, bytes/sample, ...
    per_sample = {n: float(ln[len(n) :].split()[2]) for n, ln in lines.items()}
    assert per_sample["fast rank alone"] == 0.0
    # one averaging per epoch beats a gradient all-reduce per batch
    assert 0 < per_sample["DiLoCo() H=500"] < per_sample["flodl cpu-sync"]
