"""``fdl completions bash|zsh|fish``: a completion script for the shell.

The script asks ``fdl __complete WORDS...`` for candidates each time, so completions know the
built-ins, their options and the commands of the ``fdl.yml`` of the folder you are in.
"""

from __future__ import annotations

import argparse
import contextlib

from . import _context
from ._errors import CliError
from ._parser import BUILTINS, FdlParser, available

SCRIPTS = {
    "bash": """# fdl completions for bash: add to ~/.bashrc:  eval "$(fdl completions bash)"
_fdl_complete() {
    local IFS=$'\\n'
    COMPREPLY=($(command "${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null))
}
complete -o default -F _fdl_complete fdl ./fdl
""",
    "zsh": """#compdef fdl
# fdl completions for zsh: add to ~/.zshrc:  eval "$(fdl completions zsh)"
_fdl() {
    local -a cands
    cands=("${(@f)$(command "${words[1]}" __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
    compadd -a cands
}
compdef _fdl fdl ./fdl
""",
    "fish": """# fdl completions for fish:
#   fdl completions fish > ~/.config/fish/completions/fdl.fish
complete -c fdl -f -a '(fdl __complete (commandline -opc)[2..-1] (commandline -ct) 2>/dev/null)'
""",
}
GLOBAL_FLAGS = ["-h", "--help", "-V", "--version", "-v", "-q", "--env", "--gpus", "--no-ansi"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("completions", help="shell completions")
    p.description = "Print a completion script for bash, zsh or fish."
    p.add_argument("shell", choices=sorted(SCRIPTS), help="the shell")


def run(args: argparse.Namespace) -> int:
    print(SCRIPTS[args.shell], end="")
    return 0


def _options_of(name: str) -> list[str]:
    import importlib

    module = importlib.import_module(f"flodl_cli.{BUILTINS[name][0]}")
    if not hasattr(module, "add_parser"):
        return ["--help"]
    parser = FdlParser(prog="fdl")
    sub = parser.add_subparsers(dest="command", parser_class=FdlParser)
    module.add_parser(sub)
    out: list[str] = []
    for action in sub.choices[name]._actions:
        out += action.option_strings
        if action.choices and (not action.option_strings or isinstance(action.choices, dict)):
            out += list(action.choices)
    return out


def candidates(words: list[str]) -> list[str]:
    """Completions for the last of ``words`` (the words after ``fdl``; the last may be '')."""
    from . import _manifest as mf

    *done, current = words or [""]
    done = [w for w in done if w]
    manifest = None
    with contextlib.suppress(CliError):
        file = mf.find()
        manifest = mf.load(file, _context.env) if file is not None else None
    while done and done[0].startswith(("-", "@")):
        done = done[2:] if done[0] in ("--env", "--gpus") else done[1:]
    if not done:
        if current.startswith("-"):
            pool = GLOBAL_FLAGS
        else:
            pool = [n for n in BUILTINS if available(n)] + (
                list(manifest.commands) if manifest else []
            )
            if manifest is not None:
                pool += [f"@{e}" for e in mf.envs(manifest.dir)]
    else:
        pool = [c for c in _after(done, manifest) if c.startswith("-") == current.startswith("-")]
    return sorted({c for c in pool if c.startswith(current)})


def _after(done: list[str], manifest: mf.Manifest | None) -> list[str]:  # type: ignore[name-defined]  # noqa: F821
    from . import _manifest as mf

    head = done[0]
    if manifest is not None and head in manifest.commands:
        cmd = manifest.commands[head]
        if cmd.kind == "path" and cmd.path is not None and len(done) == 1:
            with contextlib.suppress(CliError):
                sub = mf.load(
                    mf.find(cmd.path) or cmd.path / "fdl.yml", manifest.env, env_required=False
                )
                return [*sub.commands, "--", "--help"]
        return ["--", "--help"]
    if head in BUILTINS and head not in ("run", "test", "ddp-bench", "hf"):
        return _options_of(head)
    return []


def complete(words: list[str]) -> int:
    for c in candidates(words):
        print(c)
    return 0
