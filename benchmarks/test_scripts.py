"""The benchmark scripts still run (tiny sizes: this checks they work, it measures nothing)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SMOKE = {
    "checkpoint.py": ["--width", "64", "--layers", "2", "--rounds", "2"],
    "data_loader.py": ["--samples", "2000", "--rounds", "1", "--workers", "1"],
    "data_workers.py": ["--samples", "64", "--rounds", "1", "--workers", "2"],
    "hf_sentence.py": ["--sentences", "20", "--batch-size", "8"],
}


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_benchmark_script_runs(
    script: str, run_script: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    proc = run_script(HERE / script, *SMOKE[script], timeout=180)
    assert "flodl" in proc.stdout
