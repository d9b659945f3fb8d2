"""``fdl run`` and ``fdl test``: the flodl workspace's own two commands.

Both hand everything after them to the script / to nox untouched (argparse would try to read a
forwarded ``-s lint`` itself). A project's ``fdl.yml`` may define its own ``run`` or ``test``,
which then take their place.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import _context
from ._dispatch import call, child_env, resolve_gpus
from ._errors import CliError
from ._workspace import find_root

RUN_HELP = """usage: fdl run [SCRIPT] [ARGS...]

Train the flodl quickstart example (examples/quickstart.py of the workspace), or run SCRIPT
with this venv's Python. ARGS go to the script, e.g. fdl run --serve 3000 --epochs 60;
fdl's --gpus LIST goes before SCRIPT (after it, it is the script's own)."""

TEST_HELP = """usage: fdl test [NOX ARGS...]

Run the flodl workspace's test sessions through nox (default: lint, tests, isolation, docs).
NOX ARGS go to nox: fdl test -s lint, fdl test -s tests -- -k monitor, fdl test --list."""


def _root() -> Path:
    root = find_root()
    if root is None:
        raise CliError(
            "no flodl workspace here (no noxfile.py in this folder or above)",
            fix="run from a clone, call its ./fdl, or set FDL_ROOT",
        )
    return root


def passthrough(command: str, rest: list[str]) -> int:
    if rest[:1] in (["-h"], ["--help"]):
        print(RUN_HELP if command == "run" else TEST_HELP)
        return 0
    # `fdl --gpus 0,1 run` / `fdl run --gpus 0,1`: CUDA_VISIBLE_DEVICES for the child.
    gpus = resolve_gpus(_context.gpus) if _context.gpus else None
    if command == "test":
        root = _root()
        return call(
            [sys.executable, "-m", "nox", *rest], cwd=root, env=child_env(gpus, HF_HUB_OFFLINE="1")
        )
    if rest and not rest[0].startswith("-"):
        script, args = Path(rest[0]), rest[1:]
    else:
        script, args = _root() / "examples" / "quickstart.py", rest
    if not script.is_file():
        raise CliError(f"fdl run: no such script: {script}")
    return call([sys.executable, str(script), *args], env=child_env(gpus))
