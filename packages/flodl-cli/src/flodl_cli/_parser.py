"""argparse with fdl's error style, the global options, and the top-level help."""

from __future__ import annotations

import argparse
import importlib.util
import os
from typing import NoReturn

from ._errors import UsageError

# name -> (module, one-line help). Modules are imported only when their command runs.
BUILTINS: dict[str, tuple[str, str]] = {
    "setup": ("_cmd_setup", "detect CPU/RAM/GPUs and install the matching torch build"),
    "init": ("_cmd_init", "scaffold a new project (train.py, fdl.yml, tests, ./fdl)"),
    "config": ("_cmd_config", "show the resolved fdl.yml with where each value came from"),
    "diagnose": ("_cmd_diagnose", "system, torch build, GPUs and flodl packages, with fixes"),
    "probe": ("_cmd_probe", "readiness checks, one line each; exit 1 when one fails"),
    "api-ref": ("_cmd_api_ref", "API reference of the installed flodl packages"),
    "add": ("_cmd_add", "add flodl-hf to this project (pinned to this flodl release)"),
    "hf": ("_cmd_hf", "flodl-hf tasks: embed, classify, fill-mask, export, verify-export"),
    "ddp-bench": ("_cmd_ddp_bench", "run the DDP validation harness (python -m ddp_bench)"),
    "completions": ("_cmd_completions", "shell completions: bash, zsh or fish"),
    "docs": ("_cmd_docs", "build the flodl documentation site (MkDocs), optionally serve it"),
    "run": ("_cmd_run", "train the quickstart example, or run SCRIPT with this venv"),
    "test": ("_cmd_run", "run the flodl workspace's test sessions (nox)"),
}


class FdlParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`UsageError` (usage + a one-line hint, exit 2)
    instead of a bare ``sys.exit``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message, usage=self.format_usage(), hint=f"see: {self.prog} --help")


def global_parser() -> FdlParser:
    p = FdlParser(prog="fdl", add_help=False)
    p.add_argument("-h", "--help", action="store_true")
    p.add_argument("-V", "--version", action="store_true")
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--env", metavar="NAME")
    p.add_argument("--gpus", metavar="LIST")
    p.add_argument("--no-ansi", dest="ansi", action="store_false", default=None)
    p.add_argument("--ansi", dest="ansi", action="store_true")
    return p


def split_globals(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """``argv`` -> (global options, the command word or None, the words after it)."""
    i = 0
    while i < len(argv):
        tok = argv[i]
        if tok in ("--env", "--gpus"):
            i += 2
        elif tok.startswith("-") and tok != "-":
            i += 1
        else:
            return argv[:i], tok, argv[i + 1 :]
    return argv, None, []


def pull_gpus(command: str, rest: list[str]) -> tuple[str | None, list[str]]:
    """``fdl CMD ... --gpus LIST``: the ``--gpus`` given after the command word (``None`` if
    none), and the words without it.

    Words after ``--`` belong to the command and stay; so do the script's arguments in
    ``fdl run SCRIPT ARGS`` (a ``--gpus`` there is the script's own).
    """
    out: list[str] = []
    found: str | None = None
    i = 0
    while i < len(rest):
        tok = rest[i]
        if tok == "--" or (command == "run" and not out and not tok.startswith("-")):
            return found, out + rest[i:]
        if tok != "--gpus" and not tok.startswith("--gpus="):
            out.append(tok)
            i += 1
            continue
        if tok == "--gpus":
            if i + 1 >= len(rest):
                raise UsageError(
                    "--gpus needs a value: 'all' or GPU indices like 0,1",
                    hint=f"example: fdl {command} --gpus 0,1",
                )
            value, i = rest[i + 1], i + 2
        else:
            value, i = tok[len("--gpus=") :], i + 1
        if found is not None and found != value:
            raise UsageError(f"two --gpus given: {found} and {value}", hint="keep one of them")
        found = value
    return found, out


def available(name: str) -> bool:
    """Whether a built-in can work here; ``--help`` lists only those."""
    if name == "hf":
        return _found("flodl_cli._cmd_hf") and _found("flodl_hf")
    if name == "ddp-bench":
        return _found("ddp_bench")
    if name == "docs":
        from ._workspace import find_root

        root = find_root()
        return root is not None and (root / "mkdocs.yml").is_file()
    if name == "test":
        from ._workspace import find_root

        return find_root() is not None
    return True


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def top_help(project: object | None, project_error: str | None = None) -> str:
    """The text of ``fdl --help``: global options, built-ins that work here, project commands."""
    lines = [
        "usage: fdl [OPTIONS] COMMAND [ARGS...]",
        "",
        "flodl: graphs, training monitor, distributed training and HF models over PyTorch.",
        "",
        "options:",
        "  -h, --help       show this help (fdl COMMAND --help for a command's)",
        "  -V, --version    print the fdl version and the installed flodl packages",
        "  -v, -vv / -q     more / less output (exported as FLODL_VERBOSITY)",
        "  --env NAME       merge fdl.NAME.yml over fdl.yml (also: @NAME, FDL_ENV)",
        "  --gpus LIST      'all' or '0,1': CUDA_VISIBLE_DEVICES for the command (also after it)",
        "  @cluster CMD     run CMD on every machine of fdl.cluster.yml (fdl @cluster --help)",
        "  --no-ansi        no colours",
        "",
        "commands:",
    ]
    manifest_cmds = getattr(project, "commands", {})
    for name, (_, text) in BUILTINS.items():
        if name in manifest_cmds or not available(name):
            continue
        lines.append(f"  {name:<14} {text}")
    if project is not None:
        where = os.path.relpath(getattr(project, "file"))  # noqa: B009
        lines += ["", f"project commands ({where}):"]
        for name, cmd in manifest_cmds.items():
            lines.append(f"  {name:<14} {cmd.description or cmd.kind}")
    if project_error:
        lines += ["", f"fdl.yml: {project_error}"]
    return "\n".join(lines)
