"""fdl init: the scaffold runs: its own tests pass and one epoch of `fdl train` trains."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Fdl

pytest.importorskip("flodl_graph")
pytest.importorskip("flodl_monitor")


@pytest.mark.slow
def test_scaffold_tests_and_one_epoch(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("init", "demo", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proj = tmp_path / "demo"
    for rel in (
        "train.py",
        "tests/test_train.py",
        "fdl.yml",
        "pyproject.toml",
        ".gitignore",
        "fdl",
    ):
        assert (proj / rel).is_file(), rel
    assert (proj / "fdl").stat().st_mode & 0o111
    text = (proj / "pyproject.toml").read_text()
    assert '"flodl-core==0.1.0"' in text and "flodl-hf" not in text.split("[project.optional")[0]
    assert subprocess.run(["sh", "-n", str(proj / "fdl")]).returncode == 0
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=proj, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:]
    train = fdl("train", "--", "--epochs", "1", "--out", str(tmp_path / "run"), cwd=proj)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "epoch 1/1" in train.stdout and "accuracy:" in train.stdout
    assert (tmp_path / "run" / "model.fdl").is_file()


def test_with_hf_and_refusals(fdl: Fdl, tmp_path: Path) -> None:
    assert fdl("init", "withhf", "--with-hf", cwd=tmp_path).returncode == 0
    assert '"flodl-hf==0.1.0"' in (tmp_path / "withhf" / "pyproject.toml").read_text()
    again = fdl("init", "withhf", cwd=tmp_path)
    assert again.returncode == 1 and "already exists and is not empty" in again.stderr
    bad = fdl("init", "9lives", cwd=tmp_path)
    assert bad.returncode == 2 and "start with a letter" in bad.stderr


def test_distributed_path_through_flodl_ddp(fdl: Fdl, tmp_path: Path) -> None:
    ddp = pytest.importorskip("flodl_ddp")
    if not hasattr(ddp, "Trainer"):
        pytest.skip("flodl_ddp has no Trainer in this build")
    assert fdl("init", "d", cwd=tmp_path).returncode == 0
    proc = fdl("train", "--", "--epochs", "1", "--ranks", "2", "--out", str(tmp_path / "r"),
               cwd=tmp_path / "d", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "r" / "model.fdl").is_file()
