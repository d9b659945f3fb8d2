"""Workspace-wide pytest hooks and fixtures.

The ``gpu`` marker skips where no CUDA device is present; ``run_script`` runs a Python file in a
subprocess (examples, tutorials).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

# Tests never reach the network: a hub lookup without this hangs for tens of seconds first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        # A package tested alone may not pull numpy, and importing torch then warns.
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def run_script(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a Python file in a subprocess, offline, in a fresh working directory; fail the test
    with the tail of its output when it exits non-zero."""

    def run(
        script: Path, *args: str, timeout: float = 300, **env: str
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", **env)
        proc = subprocess.run(
            [sys.executable, str(script), *args],
            cwd=tmp_path,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, (
            f"{script.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        )
        return proc

    return run
