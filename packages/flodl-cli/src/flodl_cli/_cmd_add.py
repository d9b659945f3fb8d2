"""``fdl add flodl-hf [--install]``: depend on flodl-hf, pinned to this flodl release.

The dependency goes into ``[project].dependencies`` of the project's ``pyproject.toml`` (a text
edit of that one array, so comments and layout stay as they are).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from ._dispatch import call
from ._dists import flodl_release
from ._errors import CliError
from ._files import write_atomic
from ._workspace import project_dir


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("add", help="add flodl-hf to this project")
    p.description = "Add a flodl package to this project's pyproject.toml, pinned to this release."
    p.add_argument("package", choices=["flodl-hf", "hf"], help="what to add")
    p.add_argument("--install", action="store_true", help="also pip-install it into this venv")
    p.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")


def _pyproject() -> Path:
    here = project_dir()
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file():
            return folder / "pyproject.toml"
    raise CliError(
        f"no pyproject.toml in {here} or above", fix="run in a project (fdl init NAME makes one)"
    )


def add_dependency(text: str, dist: str, pin: str, file: str) -> tuple[str, str]:
    """(new text, what happened) after pinning ``dist`` in ``[project].dependencies``."""
    section = re.search(r"^\[project\][^\n]*\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    if section is None:
        raise CliError(f"{file}: no [project] table", fix="add one with a dependencies list")
    deps = re.search(r"^dependencies\s*=\s*\[(.*?)\]", section.group(1), re.S | re.M)
    if deps is None:
        raise CliError(f"{file}: [project] has no dependencies = [...]", fix="add one")
    start = section.start(1) + deps.start(1)
    body = deps.group(1)
    existing = re.search(rf"""["']{re.escape(dist)}\s*([^"']*)["']""", body)
    entry = f'"{pin}"'
    if existing is not None:
        if existing.group(0).strip("\"'") == pin:
            return text, f"{file} already depends on {pin}"
        new_body = body.replace(existing.group(0), entry)
        action = f"{file}: {existing.group(0)} -> {entry}"
    else:
        indent = re.search(r"\n([ \t]+)\S", body)
        pad = indent.group(1) if indent else "    "
        stripped = body.rstrip()
        comma = "" if not stripped.strip() or stripped.endswith(",") else ","
        new_body = f"{stripped}{comma}\n{pad}{entry},\n"
        action = f"{file}: added {entry} to [project].dependencies"
    return text[:start] + new_body + text[start + len(body) :], action


def _sources(project: Path) -> list[str]:
    """The project's pins and its ``wheels/`` (made by ``fdl init`` from a clone), as its
    ``./fdl`` uses them."""
    out: list[str] = []
    if (project / "constraints.txt").is_file():
        out += ["-c", str(project / "constraints.txt")]
    if (project / "wheels").is_dir():
        out += ["--find-links", str(project / "wheels")]
    return out


def run(args: argparse.Namespace) -> int:
    dist = "flodl-hf"
    pin = f"{dist}=={flodl_release()}"
    file = _pyproject()
    text, action = add_dependency(file.read_text(), dist, pin, str(file))
    changed = text != file.read_text()
    if changed and not args.dry_run:
        write_atomic(file, text)
    print(("would change " if args.dry_run and changed else "") + action)
    if args.install:
        cmd = [sys.executable, "-m", "pip", "install", pin, *_sources(file.parent)]
        if args.dry_run:
            print("would run: " + shlex.join(cmd))
        elif call(cmd) != 0:
            raise CliError(
                f"pip could not install {pin} (see its output above)", fix=shlex.join(cmd)
            )
    return 0
