"""``fdl setup``: look at the machine, pick the torch build, install it into this venv.

Nothing here initialises CUDA: GPUs come from ``nvidia-smi`` / the AMD KFD topology, the
installed torch from its package metadata.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import _console as con
from . import _torch_install as ti
from ._dists import version_of
from ._errors import CliError
from ._hardware import Machine, detect
from ._torch_builds import VARIANTS, Choice, base_version, choose, variant_of


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("setup", help="install the torch build this machine needs")
    p.description = "Detect CPU, RAM and GPUs, pick the torch build and install it into this venv."
    p.add_argument("-y", "--yes", "--non-interactive", action="store_true", help="do not ask")
    p.add_argument("--force", action="store_true", help="reinstall even if the build is right")
    p.add_argument("--dry-run", action="store_true", help="print the plan and the pip command")
    p.add_argument("--variant", choices=sorted(VARIANTS), help="override the chosen build")


def installed_torch() -> tuple[str | None, str | None]:
    """(version, variant) of the installed torch, from metadata only."""
    version = version_of("torch")
    if version is None:
        return None, None
    cuda = False
    if "+" not in version:
        from importlib import metadata

        cuda = any(r.startswith("nvidia-") for r in metadata.requires("torch") or [])
    return version, variant_of(version, cuda)


def _describe(
    machine: Machine, choice: Choice, torch: tuple[str | None, str | None], pin: ti.Pin
) -> list[str]:
    ram = f"{machine.ram_mib / 1024:.1f} GiB" if machine.ram_mib else "unknown"
    lines = [
        f"system   {machine.os}",
        f"cpu      {machine.cpu} ({machine.cores} cores), RAM {ram}",
    ]
    if not machine.gpus:
        lines.append("gpus     none found")
    for g in machine.gpus:
        mem = f", {g.memory_mib / 1024:.0f} GiB" if g.memory_mib else ""
        ok = choice.variant.covers(g) or choice.variant.kind == "cpu"
        mark = "" if ok else con.red("  not covered by " + choice.variant.name)
        lines.append(f"gpu {g.index}    {g.name} ({g.arch}{mem}){mark}")
    version, variant = torch
    lines.append(f"torch    {'not installed' if version is None else f'{version} ({variant})'}")
    lines.append(f"plan     torch {choice.variant.describe()}: {choice.reason}")
    lines.append(f"version  torch {pin.version} ({pin.source})")
    return lines


def run(args: argparse.Namespace) -> int:
    from ._workspace import find_root, project_dir

    machine = detect()
    choice = choose(machine.gpus)
    if args.variant:
        choice = Choice(VARIANTS[args.variant], "chosen with --variant")
    torch = installed_torch()
    version, variant = torch
    folders = [project_dir(), *[r for r in (find_root(),) if r is not None]]
    pin = ti.torch_pin(folders, version)
    for line in _describe(machine, choice, torch, pin):
        print(line)
    if choice.uncovered and not args.variant:
        gpus = ", ".join(f"GPU {g.index} ({g.arch})" for g in choice.uncovered)
        raise CliError(
            f"no prebuilt torch covers every GPU: {choice.variant.name} leaves out {gpus}",
            fix=f"fdl setup --variant {choice.variant.name} to accept it, or hide those GPUs "
            "with CUDA_VISIBLE_DEVICES",
        )
    wanted = choice.variant.name
    right = variant == wanted and version is not None and base_version(version) == pin.version
    plan = ti.plan(choice.variant, pin, force=args.force and right)
    if right and not args.force:
        print(f"torch {version} is already the {wanted} build: nothing to install")
    elif args.dry_run:
        print("\n".join(ti.dry_run_lines(plan)))
    else:
        if sys.prefix == sys.base_prefix:
            raise CliError(
                f"{sys.executable} is not in a virtual environment; fdl setup installs torch "
                "into a project's venv only",
                fix="python3 -m venv .venv && .venv/bin/pip install flodl-cli "
                "&& .venv/bin/fdl setup",
            )
        if not _confirm(args.yes, f"install {plan.spec} into {sys.prefix}?"):
            print("nothing installed")
            return 1
        ti.install(plan)
    _write_manifest(args.dry_run)
    return 0


def _confirm(yes: bool, question: str) -> bool:
    if yes or not sys.stdin.isatty():
        return True
    answer = input(f"{question} [Y/n] ").strip().lower()
    return answer in ("", "y", "yes")


def _write_manifest(dry_run: bool) -> None:
    """A starting ``fdl.yml`` in the project folder, if it has none (not in a flodl clone, whose
    commands are built in)."""
    from . import _manifest as mf
    from ._workspace import find_root, project_dir

    folder = project_dir()
    if mf.find(folder) is not None or find_root() == folder:
        return
    if dry_run:
        print(f"would write {folder / 'fdl.yml'}")
        return
    from ._files import write_atomic

    write_atomic(folder / "fdl.yml", starter_manifest(folder))
    print(f"wrote {folder / 'fdl.yml'}")


def starter_manifest(folder: Path) -> str:
    """Commands guessed from what the folder holds (train.py, tests/)."""
    lines = [
        "# fdl.yml: this project's commands (fdl COMMAND; fdl --help lists them).",
        f"description: {folder.name}",
        "commands:",
    ]
    if (folder / "train.py").is_file():
        lines += ["  train:", "    description: train the model", "    run: python train.py"]
    if (folder / "tests").is_dir():
        lines += ["  test:", "    description: run the tests", "    run: python -m pytest -q tests"]
    if lines[-1] == "commands:":
        lines[-1] = "commands: {}  # e.g. train: {run: python train.py}"
    return "\n".join(lines) + "\n"
