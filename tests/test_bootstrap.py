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


def _recording_clone(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the bootstrap with its manifests and a stand-in .venv whose python records
    every call (and "has" torch) instead of installing: the install list and the reinstall
    stamp, without a real venv."""
    clone = tmp_path / "clone"
    for rel in ("fdl", "constraints.txt", "ddp-bench/pyproject.toml"):
        (clone / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, clone / rel)
    for p in sorted((ROOT / "packages").glob("flodl-*/pyproject.toml")):
        (clone / p.relative_to(ROOT)).parent.mkdir(parents=True)
        shutil.copy(p, clone / p.relative_to(ROOT))
    log = tmp_path / "calls.log"
    bindir = clone / ".venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{log}'\n")
    (bindir / "fdl").write_text("#!/bin/sh\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    return clone, log


def _installs(clone: Path, log: Path) -> list[list[str]]:
    log.unlink(missing_ok=True)
    subprocess.run([str(clone / "fdl"), "--version"], check=True, capture_output=True)
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split() for line in lines if " pip " in f" {line} " and "install" in line]


def test_installs_pytest_with_the_plugins_the_root_config_needs(tmp_path: Path) -> None:
    # pyproject.toml sets asyncio_default_fixture_loop_scope under filterwarnings=error: without
    # pytest-asyncio, `.venv/bin/pytest` fails before collecting a test.
    clone, log = _recording_clone(tmp_path)
    config = (ROOT / "pyproject.toml").read_text()
    main = next(words for words in _installs(clone, log) if "pytest" in words)
    assert "-c" in main and str(clone / "constraints.txt") in main
    assert "asyncio_default_fixture_loop_scope" in config
    assert "pytest-asyncio" in main
    assert "pytest-aiohttp" in main  # flodl-monitor's server tests
    assert "hatchling" in main  # `fdl init` builds a project's flodl wheels without isolation


def test_reinstalls_only_when_a_manifest_or_the_script_changes(tmp_path: Path) -> None:
    clone, log = _recording_clone(tmp_path)
    assert _installs(clone, log)
    assert _installs(clone, log) == []
    with open(clone / "constraints.txt", "a") as f:
        f.write("# a new pin\n")
    assert _installs(clone, log)
    assert _installs(clone, log) == []
    with open(clone / "fdl", "a") as f:  # a new install list in the script itself
        f.write("# changed\n")
    assert _installs(clone, log)
    assert _installs(clone, log) == []


@pytest.mark.skipif(
    not (ROOT / ".venv" / "bin" / "pytest").exists(), reason="the workspace .venv is not set up"
)
def test_workspace_venv_pytest_runs_a_package_suite() -> None:
    # What a contributor types right after ./fdl made the venv (collecting is enough: the
    # config and its plugins are checked before any test runs).
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", "--collect-only",
         "packages/flodl-core/tests/test_errors.py"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
