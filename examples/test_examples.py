"""Every example script runs to completion (each in a subprocess with a fresh working dir)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLES = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("test_"))


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs(script: Path, run_script: Callable[..., object]) -> None:
    run_script(script, timeout=240, FLODL_EXAMPLE_QUICK="1")
