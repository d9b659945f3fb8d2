"""The exchange benchmark still runs (few rounds: this checks it works, it measures nothing)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.multiprocess
def test_ddp_exchange_runs(run_script: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    proc = run_script(HERE / "ddp_exchange.py", "--rounds", "40", timeout=300)
    out = proc.stdout
    assert "flodl ddp_exchange: 40 rounds" in out
    lines = out.splitlines()
    rows = [ln.split() for ln in lines if ln.startswith("rank ") and "exchange" not in ln]
    assert [r[:3] for r in rows] == [
        ["rank", "0", "waiting"], ["rank", "0", "together"],
        ["rank", "1", "waiting"], ["rank", "1", "together"],
    ]  # fmt: skip
    for r in rows:  # both paths measured (one host: the mailbox is there), and a ratio
        assert float(r[3]) > -1.0 and float(r[4]) > -1.0 and r[5].endswith("x")
