"""``fdl init NAME``: scaffold a runnable flodl project.

The project pins the flodl packages at this release and torch at the clone's version, trains a
FlowBuilder model with the flodl DataLoader and Monitor (and through flodl-ddp's Trainer with
``--gpus``), and carries its own ``./fdl`` bootstrap, ``fdl.yml``, tests and ``.gitignore``.
Made from a flodl clone, it also gets ``wheels/``: the flodl packages built from that clone,
which its ``./fdl`` installs while they are not on the package index.
"""

from __future__ import annotations

import argparse
import re
from importlib import resources
from pathlib import Path

from . import _torch_install as ti
from . import _wheelhouse as wh
from ._dists import flodl_release
from ._errors import CliError
from ._files import write_atomic
from ._workspace import source_clone

# template -> path in the project
FILES = {
    "train.py.tmpl": "train.py",
    "test_train.py.tmpl": "tests/test_train.py",
    "fdl.yml.tmpl": "fdl.yml",
    "pyproject.toml.tmpl": "pyproject.toml",
    "constraints.txt.tmpl": "constraints.txt",
    "gitignore.tmpl": ".gitignore",
    "README.md.tmpl": "README.md",
    "fdl.tmpl": "fdl",
}
NO_CLONE = "/path/to/flodl"  # in messages, when the project was not made from a clone


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("init", help="scaffold a new project")
    p.description = (
        "Scaffold a runnable flodl project in the folder NAME. From a flodl clone, the flodl "
        "packages are built into NAME/wheels/, where the project's ./fdl installs them from."
    )
    p.add_argument("name", metavar="NAME", help="project folder (and distribution name)")
    p.add_argument("--with-hf", action="store_true", help="also depend on flodl-hf")
    p.add_argument(
        "--no-wheels",
        action="store_true",
        help="do not build wheels/ (your package index has the flodl packages)",
    )


def _wheels_note(clone: Path | None) -> str:
    """The README paragraph on where the flodl packages come from."""
    if clone is not None:
        return (
            "The flodl packages are not on a package index yet: `fdl init` built their wheels\n"
            f"from the flodl clone at `{clone}` into `wheels/`, and `./fdl` installs them from\n"
            "there (keep `wheels/` with the project). To take a newer clone's code:\n"
            f"`rm -rf wheels .venv && {wh.rebuild_command(str(clone), 'wheels')} && ./fdl`."
        )
    return (
        "`./fdl` installs the flodl packages from your package index, or from `wheels/` when\n"
        "that folder is there. If your index does not have them (`could not install\n"
        "flodl-cli==...`), build their wheels from a clone of flodl, then run `./fdl` again:\n"
        f"`{wh.rebuild_command(NO_CLONE, 'wheels')}`."
    )


def render(
    name: str, version: str, with_hf: bool, *, torch: str = ti.TORCH_VERSION,
    clone: Path | None = None,
) -> dict[str, str]:  # fmt: skip
    """Project path -> file text."""
    deps = ["flodl-core", "flodl-graph", "flodl-monitor", *(["flodl-hf"] if with_hf else [])]
    values = {
        "NAME": name,
        "VERSION": version,
        "TORCH": torch,
        "CLONE": str(clone) if clone is not None else NO_CLONE,
        "WHEELS_NOTE": _wheels_note(clone),
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
    clone = source_clone()
    torch = (ti.pinned_in(clone / "constraints.txt") if clone else None) or ti.TORCH_VERSION
    made = not target.exists()
    wheels = clone is not None and not args.no_wheels
    try:
        if wheels:
            assert clone is not None
            wh.build(clone, target / "wheels")
    except BaseException:
        if made and target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        raise
    files = render(name, version, args.with_hf, torch=torch, clone=clone if wheels else None)
    for rel, text in files.items():
        write_atomic(target / rel, text, mode=0o755 if rel == "fdl" else None)
    _report(target, version, args.with_hf, torch, clone if wheels else None)
    return 0


def _report(target: Path, version: str, with_hf: bool, torch: str, clone: Path | None) -> None:
    lines = [f"created {target}/ (flodl {version}{', with flodl-hf' if with_hf else ''})"]
    if clone is not None:
        lines += [
            f"  wheels/          the flodl packages, built from {clone}: not on a package",
            "                   index yet, the project's ./fdl installs them from there",
        ]
    lines.append(
        f"  constraints.txt  torch=={torch}: fdl setup installs this machine's build of it"
    )
    if clone is None:
        lines += [
            "  the flodl packages come from your package index; if it lacks "
            f"flodl-cli=={version}, build their wheels into the project first:",
            f"    {wh.rebuild_command(NO_CLONE, str(target.resolve() / 'wheels'))}",
        ]
    lines.append(f"next: cd {target} && ./fdl train    # first call sets up .venv for this machine")
    print("\n".join(lines))
