"""``fdl``: the command-line entry point.

Commands:
    fdl run [SCRIPT] [ARGS...]   train the quickstart example (or run SCRIPT) with this venv
    fdl test [NOX ARGS...]       run the workspace's test sessions through nox
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from ._workspace import find_root

_VERSION = "0.1.0"


def _version_text() -> str:
    """``fdl 0.1.0`` plus the version of every installed flodl distribution (read from package
    metadata, so torch is not imported)."""
    from importlib import metadata

    lines = [f"fdl {_VERSION}"]
    for dist in ("flodl-core", "flodl-graph", "flodl-monitor", "flodl-ddp", "flodl-hf"):
        try:
            lines.append(f"  {dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            continue
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fdl",
        formatter_class=argparse.RawTextHelpFormatter,
        description="flodl: graphs, training monitor, distributed training and HF models over "
        "PyTorch.",
    )
    p.add_argument("--version", action="version", version=_version_text())
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    run = sub.add_parser("run", help="train the quickstart example (or run a script)")
    run.add_argument("script", nargs="?", help="a Python script (default: examples/quickstart.py)")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the script")
    test = sub.add_parser("test", help="run the test suite (nox sessions)")
    test.add_argument("nox_args", nargs=argparse.REMAINDER, help="arguments passed to nox")
    return p


def _root_or_exit() -> Path:
    root = find_root()
    if root is None:
        sys.exit(
            "fdl: no flodl workspace here (no noxfile.py in this folder or above); "
            "run from a clone or set FDL_ROOT"
        )
    return root


def _cmd_run(script: str | None, args: list[str]) -> int:
    path = _root_or_exit() / "examples" / "quickstart.py" if script is None else Path(script)
    if not path.is_file():
        sys.exit(f"fdl run: no such script: {path}")
    return subprocess.call([sys.executable, str(path), *args])


def _cmd_test(nox_args: list[str]) -> int:
    root = _root_or_exit()
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    return subprocess.call([sys.executable, "-m", "nox", *nox_args], cwd=root, env=env)


def _check_core_version() -> None:
    """Exit with the fix when the installed flodl-core is of another release.

    flodl-core's own ``check_siblings`` would import torch; the CLI must start without it, so
    this reads the package metadata directly.
    """
    from importlib import metadata

    try:
        found = metadata.version("flodl-core")
    except metadata.PackageNotFoundError:
        return  # a source checkout on sys.path: nothing to compare against
    if found != _VERSION:
        sys.exit(
            f"fdl {_VERSION} needs flodl-core=={_VERSION}, found flodl-core=={found}; fix with: "
            f"pip install flodl-cli=={_VERSION} flodl-core=={_VERSION}"
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fdl`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    _check_core_version()
    # `run` and `test` pass everything after them through untouched (argparse would try to
    # interpret a forwarded `-s lint` itself).
    if argv and argv[0] == "test":
        return _cmd_test(argv[1:])
    if argv and argv[0] == "run" and not (len(argv) > 1 and argv[1] in ("-h", "--help")):
        rest = argv[1:]
        if rest and not rest[0].startswith("-"):
            return _cmd_run(rest[0], rest[1:])
        return _cmd_run(None, rest)
    args = _parser().parse_args(argv)
    if args.command is None:
        _parser().print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
