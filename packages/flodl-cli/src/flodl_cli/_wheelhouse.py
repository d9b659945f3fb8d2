"""The flodl packages of a clone, built as wheels into a folder (a project's ``wheels/``).

While the flodl packages are not on a package index, a project made from a clone installs them
from these wheels (``pip install --find-links wheels``): its ``pyproject.toml`` keeps the same
exact pins (``flodl-core==0.1.0``) it will have once they are published, and it runs the code it
was made with, whatever later happens to the clone.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from ._errors import CliError


def packages(clone: Path) -> list[Path]:
    """The folders of the clone's flodl distributions (``packages/flodl-*``)."""
    found = (clone / "packages").glob("flodl-*")
    return sorted(p for p in found if (p / "pyproject.toml").is_file())


def rebuild_command(clone: str, target: str) -> str:
    """The shell line that builds the wheels again (for messages and the project's README)."""
    where = f"{shlex.quote(clone)}/packages/flodl-*"
    return f"python3 -m pip wheel --no-deps -w {shlex.quote(target)} {where}"


def build(clone: Path, target: Path) -> list[Path]:
    """Build every flodl package of ``clone`` into the new folder ``target``; returns the wheels.

    The wheels are built in a temporary folder next to ``target`` and moved in place at the
    end, so a failed build leaves no ``target`` behind.
    """
    dists = packages(clone)
    if not dists:
        raise CliError(f"{clone}/packages holds no flodl package to build")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}-{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()  # mode 0o777 less the umask, as the folder will keep
    try:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp)]
        # hatchling in this venv (the clone's ./fdl installs it): no isolated build env per
        # package, ~1 s for all of them instead of ~9 s.
        if importlib.util.find_spec("hatchling") is not None:
            cmd.append("--no-build-isolation")
        proc = subprocess.run([*cmd, *map(str, dists)], capture_output=True, text=True)
        wheels = sorted(tmp.glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != len(dists):
            tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise CliError(
                f"could not build the flodl wheels from {clone}:\n{tail}",
                fix=rebuild_command(str(clone), str(target)) + " shows pip's full output",
            )
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return sorted(target.glob("*.whl"))
