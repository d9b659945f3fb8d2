"""The CLI start-up benchmark still runs (two rounds: this checks it works, measures nothing)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_cli_startup_script_runs(
    run_script: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    proc = run_script(HERE / "cli_startup.py", "--runs", "2", timeout=120)
    assert "flodl fdl start-up" in proc.stdout and "fdl --help" in proc.stdout
