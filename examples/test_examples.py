"""Every example script runs to completion (each in a subprocess with a fresh working dir)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLES = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("test_"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path, tmp_path: Path) -> None:
    env = dict(os.environ, HF_HUB_OFFLINE="1", FLODL_EXAMPLE_QUICK="1")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, (
        f"{script.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    )
