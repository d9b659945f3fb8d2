"""The ``./fdl`` bootstrap script: interpreter checks and the no-reinstall fast path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FDL = ROOT / "fdl"


def _copy_script(tmp_path: Path) -> Path:
    """The bootstrap alone in an empty folder, so it would have to create a fresh .venv."""
    target = tmp_path / "fdl"
    shutil.copy(FDL, target)
    (tmp_path / "constraints.txt").write_text("torch==2.13.0\n")
    return target


def test_refuses_old_python_with_a_clear_message(tmp_path: Path) -> None:
    script = _copy_script(tmp_path)
    fake = tmp_path / "python3.9"
    fake.write_text(
        "#!/bin/sh\n"
        "case \"$*\" in *version_info*'>= (3, 10)'*) exit 1;; esac\n"
        'case "$*" in *version.split*) echo 3.9.18; exit 0;; esac\n'
        "exit 0\n"
    )
    fake.chmod(0o755)
    env = dict(os.environ, FDL_PYTHON=str(fake))
    proc = subprocess.run([str(script), "--version"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "flodl needs Python >= 3.10" in proc.stderr
    assert "3.9.18" in proc.stderr
    assert not (tmp_path / ".venv").exists()


def test_missing_interpreter_is_named(tmp_path: Path) -> None:
    script = _copy_script(tmp_path)
    env = dict(os.environ, FDL_PYTHON="no-such-python-xyz")
    proc = subprocess.run([str(script), "--version"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "no 'no-such-python-xyz' on PATH" in proc.stderr


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "fdl").exists(), reason="the workspace .venv is not set up"
)
def test_second_run_does_not_reinstall() -> None:
    first = subprocess.run([str(FDL), "--version"], capture_output=True, text=True, check=True)
    second = subprocess.run([str(FDL), "--version"], capture_output=True, text=True, check=True)
    assert second.stdout.startswith("fdl 0.1.0")
    assert "installing" not in second.stderr, second.stderr
    assert first.stdout == second.stdout
