"""``fdl init NAME``: scaffold a runnable flodl project.

The project pins the flodl packages at this release, trains a FlowBuilder model with the flodl
DataLoader and Monitor (and through flodl-ddp's Trainer with ``--gpus``), and carries its own
``./fdl`` bootstrap, ``fdl.yml``, tests and ``.gitignore``.
"""

from __future__ import annotations

import argparse
import re
from importlib import resources
from pathlib import Path

from ._dists import flodl_release
from ._errors import CliError
from ._files import write_atomic

# template -> path in the project
FILES = {
    "train.py.tmpl": "train.py",
    "test_train.py.tmpl": "tests/test_train.py",
    "fdl.yml.tmpl": "fdl.yml",
    "pyproject.toml.tmpl": "pyproject.toml",
    "gitignore.tmpl": ".gitignore",
    "README.md.tmpl": "README.md",
    "fdl.tmpl": "fdl",
}


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("init", help="scaffold a new project")
    p.description = "Scaffold a runnable flodl project in the folder NAME."
    p.add_argument("name", metavar="NAME", help="project folder (and distribution name)")
    p.add_argument("--with-hf", action="store_true", help="also depend on flodl-hf")


def render(name: str, version: str, with_hf: bool) -> dict[str, str]:
    """Project path -> file text."""
    deps = ["flodl-core", "flodl-graph", "flodl-monitor", *(["flodl-hf"] if with_hf else [])]
    values = {
        "NAME": name,
        "VERSION": version,
        "DEPENDENCIES": "\n".join(f'    "{d}=={version}",' for d in deps),
    }
    out: dict[str, str] = {}
    folder = resources.files("flodl_cli") / "templates"
    for template, target in FILES.items():
        text = (folder / template).read_text()
        for key, value in values.items():
            text = text.replace("{{" + key + "}}", value)
        out[target] = text
    return out


def run(args: argparse.Namespace) -> int:
    target = Path(args.name)
    name = target.name
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise CliError(
            f"project name {name!r}: start with a letter, then letters, digits, '-' or '_'",
            code=2,
        )
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise CliError(f"{target} already exists and is not empty", fix="pick another NAME")
    version = flodl_release()
    for rel, text in render(name, version, args.with_hf).items():
        write_atomic(target / rel, text, mode=0o755 if rel == "fdl" else None)
    print(f"created {target}/ (flodl {version}{', with flodl-hf' if args.with_hf else ''})")
    print(f"  cd {target} && ./fdl train    # first call sets up .venv for this machine")
    return 0
