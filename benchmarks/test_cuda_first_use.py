"""The CUDA first-use benchmark: a clear refusal without CUDA, every step's line with it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parent / "cuda_first_use.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_refuses_without_cuda() -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 2 and "needs a CUDA device" in proc.stderr, proc.stderr


@pytest.mark.gpu
def test_times_every_step(run_script: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    lines = run_script(SCRIPT, timeout=120).stdout.splitlines()
    assert lines[0].startswith("flodl cuda_first_use:")
    rows = {line[:40].strip(): line[40:].split() for line in lines[2:]}
    assert next(iter(rows)) == "context (first tensor)" and len(rows) == 5
    for name, times in list(rows.items())[1:]:
        first, again = map(float, times)
        assert first > 0.0 and again > 0.0, (name, times)  # two synchronised timings
