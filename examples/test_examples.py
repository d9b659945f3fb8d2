"""Every example script runs to completion (each in a subprocess with a fresh working dir).

Examples run in their quick mode and offline (``FLODL_OFFLINE=1``: dataset fetches never
download), so a test never touches the network.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLES = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("test_"))
OFFLINE = {"FLODL_EXAMPLE_QUICK": "1", "FLODL_OFFLINE": "1"}


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path, run_script: Callable[..., object]) -> None:
    run_script(script, timeout=240, **OFFLINE)


def test_mnist_falls_back_to_synthetic_and_says_so(
    tmp_path: Path, run_script: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """With an empty cache and downloads off, the LeNet example trains on synthetic digits and
    says so on stderr; nothing is downloaded."""
    cache = tmp_path / "empty-cache"
    proc = run_script(HERE / "mnist_lenet.py", timeout=240, FLODL_DATA=str(cache), **OFFLINE)
    assert "MNIST unavailable" in proc.stderr and "SYNTHETIC" in proc.stderr
    assert "synthetic test accuracy" in proc.stdout
    assert not (cache / "mnist").exists() or not any((cache / "mnist").iterdir())
