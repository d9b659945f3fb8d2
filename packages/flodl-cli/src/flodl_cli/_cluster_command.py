"""What ``fdl @cluster WORDS`` runs on each worker: an fdl.yml command resolved, or WORDS as is.

``fdl @cluster train`` where ``train`` is a command of the project's fdl.yml runs what
``fdl train`` would run, composed the same way (a run line with the arguments after ``--`` and
``append``; a preset's ``entry`` with its options as flags and ``FDL_CONFIG``; a path command's
sub-manifest), on every worker. A worker's ``path`` is its copy of the project, the folder of
the top fdl.yml: a sub-manifest's command runs in the matching sub-folder there. A first word
that is not a command of fdl.yml (``python``, ``torchrun``, a script) runs literally.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from . import _manifest as mf
from ._dispatch import _append, _deep, flags, split_args
from ._errors import UsageError

# A line made of these characters only is a plain argv: it needs no shell on the worker.
_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./\s'\"-]*$")


@dataclass(frozen=True)
class Resolved:
    """The argv each worker runs, the environment added there, and the fdl.yml command (if any)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    command: str | None = None  # "train" when the words named an fdl.yml command
    line: str = ""  # the composed shell line of that command


def resolve(words: list[str], start: Path | None = None) -> Resolved:
    """``words`` after ``fdl @cluster [OPTIONS]``, resolved against the fdl.yml found from
    ``start`` (default: the working directory)."""
    file = mf.find(start)
    if file is None:
        return Resolved(list(words))
    top = mf.load(file, None)  # fdl.cluster.yml is the cluster file, not an fdl.yml overlay
    if words[0] not in top.commands:
        return Resolved(list(words))
    return _resolve(top, top, words[0], words[1:], words[0])


def _resolve(top: mf.Manifest, m: mf.Manifest, name: str, rest: list[str], shown: str) -> Resolved:
    cmd = m.commands[name]
    before, user = split_args(name, rest)
    if cmd.kind == "path":
        assert cmd.path is not None
        sub = mf.load(mf.find(cmd.path) or cmd.path / "fdl.yml", None, env_required=False)
        if before:
            if before[0] not in sub.commands:
                known = ", ".join(sub.commands) or "none"
                raise UsageError(
                    f"'{shown}' has no command '{before[0]}' (commands: {known})",
                    hint=f"see: fdl {shown} --help",
                )
            tail = before[1:] + (["--", *user] if "--" in rest else [])
            return _resolve(top, sub, before[0], tail, f"{shown} {before[0]}")
        if sub.entry:
            return _entry(top, sub, sub.config, user, shown)
        raise UsageError(f"'{shown}' needs a command", hint=f"see: fdl {shown} --help")
    if before:
        raise UsageError(
            f"arguments for '{shown}' go after '--': got {shlex.join(before)}",
            usage=f"usage: fdl @cluster {shown} [-- ARGS...]\n",
            hint=f"fdl @cluster {shown} -- {shlex.join(before)}",
        )
    if cmd.kind == "run":
        line = " ".join(x for x in (cmd.run, shlex.join(user), _append(cmd)) if x)
        return Resolved(_argv(top, m, line), {}, shown, line)
    merged = {s: _deep(m.config.get(s, {}), cmd.config.get(s, {})) for s in mf.SECTIONS}
    return _entry(top, m, merged, user, shown)


def _entry(
    top: mf.Manifest, m: mf.Manifest, config: dict[str, object], user: list[str], shown: str
) -> Resolved:
    assert m.entry is not None
    options = config.get("options", {})
    args = flags(options if isinstance(options, dict) else {}, mf.ym.line_of(m.doc, ("entry",)))
    line = " ".join(x for x in (m.entry, shlex.join([*args, *user])) if x)
    sections = {k: v for k, v in config.items() if k != "options" and v}
    env = {"FDL_CONFIG": json.dumps(sections)} if sections else {}
    return Resolved(_argv(top, m, line), env, shown, line)


def _argv(top: mf.Manifest, m: mf.Manifest, line: str) -> list[str]:
    """A plain line becomes its words (so the node agent can put the worker's interpreter in
    place of ``python``); anything needing a shell, or a sub-folder, runs through ``sh -c``."""
    rel = os.path.relpath(m.dir.resolve(), top.dir.resolve())
    if rel == "." and _PLAIN.match(line):
        return shlex.split(line)
    if rel != ".":
        line = f"cd {shlex.quote(rel)} && {line}"
    return ["sh", "-c", line]
