"""A project made by ``fdl init`` in a clone installs and runs in a fresh venv with nothing but
the package index: the flodl packages from the wheels ``fdl init`` built, torch from the clone's
pin, then the project's own ``./fdl train`` and ``./fdl test``.

One project, made once for the module (the venv with torch costs ~30 s): here rather than in
flodl-cli's tests, which CI runs twice.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import flodl_cli

ROOT = Path(__file__).resolve().parent.parent
# fdl init builds the wheels when it runs from a clone's sources (an editable install).
FROM_CLONE = ROOT / "packages" / "flodl-cli" in Path(flodl_cli.__file__).resolve().parents

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not FROM_CLONE, reason="fdl does not run from this clone's sources"),
]


def _env(bindir: Path) -> dict[str, str]:
    """The user's environment, less what would leak this test's own packages or project into
    the project's venv, with a GPU-less ``nvidia-smi`` first on PATH (so ``fdl setup`` picks the
    CPU build on any machine)."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "FDL_ROOT", "FDL_ENV", "CUDA_VISIBLE_DEVICES")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    return env


def _fdl_init(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    code = "import sys; from flodl_cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, "init", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, dict[str, str]]]:
    base = tmp_path_factory.mktemp("init")
    bindir = base / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\n")  # lists no GPU
    (bindir / "nvidia-smi").chmod(0o755)
    proc = _fdl_init("myproj", cwd=base)
    assert proc.returncode == 0, proc.stderr
    yield base / "myproj", proc.stdout, _env(bindir)
    shutil.rmtree(base / "myproj" / ".venv", ignore_errors=True)


def _run(proj: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(proj / "fdl"), *args], cwd=proj, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip


def test_init_builds_the_wheels_and_pins_torch_as_the_clone(
    made: tuple[Path, str, dict[str, str]],
) -> None:
    proj, out, _ = made
    dists = sorted(p.name.split("-")[0] for p in (proj / "wheels").glob("*-0.1.0-*.whl"))
    assert dists == [
        "flodl_cli", "flodl_core", "flodl_ddp", "flodl_graph", "flodl_hf", "flodl_monitor",
    ]  # fmt: skip
    pin = next(
        line for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.startswith("torch==")
    )  # fmt: skip
    assert pin in (proj / "constraints.txt").read_text().splitlines()
    assert f"built from {ROOT}" in out
    assert f"constraints.txt  {pin}" in out
    assert "next: cd myproj && ./fdl train" in out


def test_train_and_test_in_a_fresh_venv(made: tuple[Path, str, dict[str, str]]) -> None:
    proj, _, env = made
    train = _run(proj, env, "train", "--", "--epochs", "1", "--out", "runs/one")
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-5000:]
    assert "epoch 1/1" in train.stdout and "accuracy:" in train.stdout
    assert (proj / "runs" / "one" / "model.fdl").is_file()
    # The venv is the project's own, with the flodl packages from wheels/ (not the clone's
    # sources) and torch at the pin, in its CPU build.
    site = next((proj / ".venv" / "lib").glob("python3.*/site-packages"))
    assert (site / "flodl_core" / "__init__.py").is_file()
    assert not list(site.glob("__editable__*flodl*"))
    assert list(site.glob("torch-2.13.0+cpu.dist-info")), sorted(
        p.name for p in site.glob("torch*")
    )
    tests = _run(proj, env, "test")
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert "3 passed" in tests.stdout


def test_missing_wheels_say_how_to_build_them(
    made: tuple[Path, str, dict[str, str]], tmp_path: Path
) -> None:
    # A copy of the project without wheels/, on an index without flodl: the message names the
    # folder and the exact command that fills it from the clone.
    proj = tmp_path / "copy"
    shutil.copytree(made[0], proj, ignore=shutil.ignore_patterns(".venv", "wheels", "runs"))
    env = dict(made[2], PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "none"))
    proc = _run(proj, env, "--version")
    assert proc.returncode == 1
    assert "could not install flodl-cli==0.1.0: the flodl packages are not on your package" in (
        proc.stderr
    )
    rebuild = (
        f"fdl:   python3 -m pip wheel --no-deps -w '{proj / 'wheels'}' '{ROOT}'/packages/flodl-*"
    )
    assert rebuild in proc.stderr
