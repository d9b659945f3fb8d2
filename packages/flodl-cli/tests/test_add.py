"""fdl add flodl-hf: the pinned dependency lands in [project].dependencies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import Fdl

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PYPROJECT = '[project]\nname = "x"\ndependencies = [\n  "numpy",  # keep me\n]\n\n[tool.x]\na = 1\n'


def _deps(p: Path) -> list[str]:
    return tomllib.loads(p.read_text())["project"]["dependencies"]


def test_adds_pin_once_and_updates_an_old_one(fdl: Fdl, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    proc = fdl("add", "flodl-hf", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _deps(tmp_path / "pyproject.toml") == ["numpy", "flodl-hf==0.1.0"]
    assert "# keep me" in (tmp_path / "pyproject.toml").read_text()
    assert "already depends on flodl-hf==0.1.0" in fdl("add", "hf", cwd=tmp_path).stdout
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.replace('"numpy",', '"flodl-hf==0.0.1",'))
    fdl("add", "flodl-hf", cwd=tmp_path)
    assert _deps(tmp_path / "pyproject.toml") == ["flodl-hf==0.1.0"]


def test_dry_run_changes_nothing(fdl: Fdl, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    proc = fdl("add", "flodl-hf", "--install", "--dry-run", cwd=tmp_path)
    assert proc.returncode == 0
    assert (tmp_path / "pyproject.toml").read_text() == PYPROJECT
    assert f"would run: {sys.executable} -m pip install flodl-hf==0.1.0" in proc.stdout


def test_install_offline_when_already_there(fdl: Fdl, tmp_path: Path) -> None:
    pytest.importorskip("flodl_hf")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    # --no-index: pip may not reach any index; flodl-hf is installed, so pip has nothing to do.
    proc = fdl("add", "flodl-hf", "--install", cwd=tmp_path, PIP_NO_INDEX="1", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_errors(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("add", "flodl-hf", cwd=tmp_path)
    assert proc.returncode == 1 and "no pyproject.toml" in proc.stderr
    (tmp_path / "pyproject.toml").write_text("[tool.x]\n")
    assert "no [project] table" in fdl("add", "flodl-hf", cwd=tmp_path).stderr
    proc = fdl("add", "numpy", cwd=tmp_path)
    assert proc.returncode == 2 and "invalid choice: 'numpy'" in proc.stderr
