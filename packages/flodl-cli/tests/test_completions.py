"""fdl completions: scripts for three shells; candidates know built-ins and the manifest."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Fdl


def _project(tmp_path: Path) -> None:
    (tmp_path / "fdl.yml").write_text("commands:\n  train: python t.py\n  bench: {path: b}\n")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "fdl.yml").write_text("commands:\n  quick: echo q\n")
    (tmp_path / "fdl.ci.yml").write_text("{}\n")


def test_candidates(fdl: Fdl, tmp_path: Path) -> None:
    _project(tmp_path)
    top = fdl("__complete", "").stdout.split()
    assert {"setup", "init", "train", "bench", "@ci"} <= set(top)
    assert fdl("__complete", "tr").stdout.split() == ["train"]
    assert "quick" in fdl("__complete", "bench", "").stdout.split()
    assert "--dry-run" in fdl("__complete", "setup", "--").stdout.split()
    assert fdl("__complete", "completions", "").stdout.split() == ["bash", "fish", "zsh"]
    assert "--gpus" in fdl("__complete", "--").stdout.split()


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_scripts(fdl: Fdl, shell: str) -> None:
    proc = fdl("completions", shell)
    assert proc.returncode == 0 and "__complete" in proc.stdout
    if shutil.which(shell) and shell != "fish":
        assert subprocess.run([shell, "-n"], input=proc.stdout, text=True).returncode == 0


def test_bash_completion_end_to_end(fdl: Fdl, tmp_path: Path) -> None:
    if not shutil.which("bash"):
        pytest.skip("no bash")
    _project(tmp_path)
    script = fdl("completions", "bash").stdout
    shim = tmp_path / "bin" / "fdl"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'import sys; from flodl_cli import main; "
                    "sys.exit(main())' \"$@\"\n")  # fmt: skip
    shim.chmod(0o755)
    test = script + '\nCOMP_WORDS=(fdl tr); COMP_CWORD=1; _fdl_complete; echo "${COMPREPLY[@]}"\n'
    env = {k: v for k, v in os.environ.items() if k != "FDL_ROOT"}
    env["PATH"] = f"{shim.parent}{os.pathsep}{env['PATH']}"
    out = subprocess.run(
        ["bash", "-c", test], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert out.stdout.split() == ["train"], out.stderr


def test_unknown_shell(fdl: Fdl) -> None:
    proc = fdl("completions", "tcsh")
    assert proc.returncode == 2 and "invalid choice: 'tcsh'" in proc.stderr
