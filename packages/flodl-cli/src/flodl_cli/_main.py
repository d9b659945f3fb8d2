"""``fdl``: the command-line entry point.

Startup imports nothing heavy: argparse, and pyyaml only when a ``fdl.yml`` is there. Each
command's module is imported when that command runs; torch only by the commands that need it.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from . import _console as con
from . import _context
from ._dists import CLI_VERSION, installed_versions
from ._errors import CliError, UsageError
from ._parser import BUILTINS, FdlParser, global_parser, pull_gpus, split_globals, top_help


def _version_text() -> str:
    """``fdl 0.1.0`` plus every installed flodl distribution (from dist-info names: no torch)."""
    lines = [f"fdl {CLI_VERSION}"]
    for dist, version in installed_versions().items():
        if dist == "flodl-cli":
            continue
        note = "" if version == CLI_VERSION else f"  (not {CLI_VERSION}: fix with fdl diagnose)"
        lines.append(f"  {dist} {version}{note}")
    return "\n".join(lines)


def _load_project(env: str | None):  # type: ignore[no-untyped-def]
    from . import _manifest as mf

    file = mf.find()
    return None if file is None else mf.load(file, env)


def _need_manifest(env: str) -> None:
    """``--env`` / ``@env`` with no ``fdl.yml`` to merge ``fdl.<env>.yml`` over is a usage
    error (it was silently ignored)."""
    from . import _manifest as mf

    if mf.find() is None:
        raise UsageError(
            f"--env {env}: no fdl.yml here or in a parent folder, so no fdl.{env}.yml to merge",
            hint=f"run it from the project's folder, or drop --env {env} / @{env}",
        )


def _run_builtin(name: str, rest: list[str]) -> int:
    module = importlib.import_module(f"flodl_cli.{BUILTINS[name][0]}")
    parser = FdlParser(prog="fdl")
    sub = parser.add_subparsers(dest="command", parser_class=FdlParser)
    module.add_parser(sub)
    # Parse with the command's own parser, so a wrong flag shows *its* usage line.
    args = sub.choices[name].parse_args(rest)
    args.command = name
    return int(module.run(args))


def _dispatch(command: str, rest: list[str], env: str | None) -> int:
    from ._manifest import RESERVED

    if command in RESERVED and command in BUILTINS:
        if command == "hf":
            from ._cmd_missing import hf_available

            hf_available()
        if command == "ddp-bench":
            return _run_builtin_passthrough(command, rest)
        return _run_builtin(command, rest)
    project = _load_project(env)
    if project is not None and command in project.commands:
        from ._dispatch import resolve_gpus, run_command
        from ._manifest import announce

        announce(project.file)
        gpus = resolve_gpus(_context.gpus) if _context.gpus else None
        return run_command(project, command, rest, gpus)
    if command in ("run", "test"):
        from . import _cmd_run

        return _cmd_run.passthrough(command, rest)
    if project is not None and rest and env is None:
        from ._manifest import overlay_file

        # `fdl ci test`: an environment named as the first word, when its overlay exists.
        if overlay_file(project.dir, command) is not None:
            _context.env = command
            return _dispatch(rest[0], rest[1:], command)
    names = [n for n in BUILTINS] + (list(project.commands) if project is not None else [])
    close = difflib.get_close_matches(command, names, n=1)
    raise UsageError(
        f"unknown command '{command}'",
        usage="usage: fdl [OPTIONS] COMMAND [ARGS...]\n",
        hint=f"did you mean 'fdl {close[0]}'?" if close else "see: fdl --help",
    )


def _run_builtin_passthrough(command: str, rest: list[str]) -> int:
    from . import _cmd_ddp_bench

    return _cmd_ddp_bench.passthrough(rest)


def _main(argv: list[str]) -> int:
    head, command, rest = split_globals(argv)
    g = global_parser().parse_args(head)
    con.configure(-1 if g.quiet else g.verbose, g.ansi)
    env = g.env
    if command is not None and command.startswith("@"):
        if env is not None and env != command[1:]:
            raise UsageError(
                f"two environments given: --env {env} and {command}", hint="keep one of them"
            )
        env, command = command[1:], (rest[0] if rest else None)
        rest = rest[1:]
    if env not in (None, "cluster") and command not in (None, "__complete"):
        _need_manifest(env)  # asked for by name: FDL_ENV may be another project's, not this
    env = env or os.environ.get("FDL_ENV") or None
    if command not in (None, "__complete") and env != "cluster":
        # `fdl train --gpus 0,1` as well as `fdl --gpus 0,1 train`.
        late, rest = pull_gpus(command, rest)
        if late is not None and g.gpus is not None and late != g.gpus:
            raise UsageError(f"two --gpus given: {g.gpus} and {late}", hint="keep one of them")
        g.gpus = late if late is not None else g.gpus
    _context.env, _context.gpus = env, g.gpus
    if command == "__complete":
        from ._cmd_completions import complete

        return complete(rest)
    if g.version:
        print(_version_text())
        return 0
    if env == "cluster" and command is not None:  # fdl @cluster CMD: run CMD on every worker
        from ._cmd_cluster import dispatch

        return dispatch(command, rest)
    if g.help or command is None:
        try:
            project, problem = _load_project(env), None
        except CliError as e:
            project, problem = None, str(e)
        print(top_help(project, problem), file=sys.stdout if g.help else sys.stderr)
        if not g.help:
            print("\nfdl: error: a command is required", file=sys.stderr)
        return 0 if g.help else 2
    return _dispatch(command, rest, env)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``fdl`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(argv)
    except UsageError as e:
        if e.usage:
            sys.stderr.write(e.usage)
        print(f"fdl: error: {e}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.code
    except CliError as e:
        print(f"fdl: error: {e}", file=sys.stderr)
        return e.code
    except BrokenPipeError:
        # `fdl api-ref | head`: the reader left; say nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("fdl: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        # flodl's own errors (ConfigError, DataError, ...) are expected: one line, no traceback.
        expected = any(c.__name__ == "FlodlError" for c in type(e).__mro__)
        if con.verbosity >= 1:
            traceback.print_exc()
        label = type(e).__name__
        if expected:
            print(f"fdl: error: {label}: {e}", file=sys.stderr)
        else:
            print(
                f"fdl: internal error: {label}: {e} (run with -v for the traceback)",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
