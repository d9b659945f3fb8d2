"""Running manifest commands: run lines, path recursion, presets; ``--gpus``; child processes.

A run command's line is composed as ``run`` + the user's arguments (only those after ``--``,
each shell-quoted) + ``append``, and runs through ``sh -c`` in the manifest's directory. A preset
runs its manifest's ``entry`` with ``options`` (the manifest's, with the preset's merged over
them) as ``--key value`` flags; the merged ``training``/``ddp``/``output`` sections reach the
child as JSON in ``FDL_CONFIG``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import _console as con
from . import _manifest as mf
from ._errors import CliError, UsageError


def child_env(gpus: list[int] | None = None, **extra: str) -> dict[str, str]:
    """The environment for a child command: this interpreter's ``bin`` first on ``PATH`` (so a
    manifest's ``python`` is the venv's even when the venv is not activated), and ``--gpus``."""
    env = dict(os.environ, **extra)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        env["FLODL_WORLD_SIZE"] = str(len(gpus))
    return env


def call(
    cmd: str | list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None
) -> int:
    """Run ``cmd`` (a shell line or an argv) and return its exit status.

    Ctrl-C reaches the child too (same process group); fdl then keeps waiting, so a training
    script can write its partial report before it exits.
    """
    try:
        proc = subprocess.Popen(cmd, shell=isinstance(cmd, str), cwd=cwd, env=env)
    except OSError as e:
        name = cmd if isinstance(cmd, str) else cmd[0]
        raise CliError(f"cannot start {name}: {e.strerror}") from None
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            continue


def resolve_gpus(spec: str) -> list[int]:
    """``--gpus all`` or ``--gpus 0,1`` -> GPU indices, checked against the machine's GPUs."""
    from ._hardware import detect

    have = [g.index for g in detect().gpus]
    if spec == "all":
        if not have:
            raise CliError("--gpus all: no GPU found (nvidia-smi and /sys/class/kfd see none)")
        return have
    parts = [p.strip() for p in spec.split(",")]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise UsageError(
            f"--gpus {spec!r}: expected 'all' or distinct GPU indices like 0,1",
            hint="example: fdl --gpus 0,1 train",
        )
    wanted = [int(p) for p in parts]
    missing = [i for i in wanted if i not in have]
    if missing:
        seen = ", ".join(map(str, have)) or "none"
        raise CliError(f"--gpus {spec}: no GPU {missing[0]} on this machine (GPUs: {seen})")
    return wanted


def split_args(name: str, rest: list[str]) -> tuple[list[str], list[str]]:
    """``rest`` -> (words before ``--``, user arguments after it)."""
    if "--" in rest:
        i = rest.index("--")
        return rest[:i], rest[i + 1 :]
    return rest, []


def flags(options: dict[str, Any], where: str) -> list[str]:
    """``{"epochs": 3, "fast": True, "layers": [2, 4]}`` -> ``--epochs 3 --fast --layers 2 4``."""
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + str(key).replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, list):
            out += [flag, *map(str, value)]
        elif isinstance(value, dict):
            raise CliError(f"{where}: options.{key}: expected a value or a list, not a mapping")
        else:
            out += [flag, str(value)]
    return out


def _deep(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def describe(m: mf.Manifest, cmd: mf.Command) -> str:
    """What ``fdl CMD --help`` shows for a manifest command."""
    lines = [f"usage: fdl {cmd.name} [-- ARGS...]", ""]
    if cmd.description:
        lines += [cmd.description, ""]
    if cmd.kind == "run":
        lines.append(f"runs: {cmd.run}" + (f"  (then: {_append(cmd)})" if cmd.append else ""))
        lines.append("ARGS after '--' go between the run line and append:.")
    elif cmd.kind == "path":
        assert cmd.path is not None
        sub = mf.load(mf.find(cmd.path) or cmd.path / "fdl.yml", m.env, env_required=False)
        lines[0] = f"usage: fdl {cmd.name} [COMMAND] [-- ARGS...]"
        lines.append(f"commands of {sub.file}:")
        lines += [f"  {n:<14} {c.description}" for n, c in sub.commands.items()]
    else:
        opts = _deep(m.config.get("options", {}), cmd.config.get("options", {}))
        lines.append(f"runs: {m.entry} {shlex.join(flags(opts, cmd.where))}".rstrip())
    lines.append(f"defined at {cmd.where}")
    return "\n".join(lines)


def _append(cmd: mf.Command) -> str:
    if isinstance(cmd.append, list):
        return shlex.join(cmd.append)
    return cmd.append or ""


def run_command(m: mf.Manifest, name: str, rest: list[str], gpus: list[int] | None) -> int:
    """Run manifest command ``name`` of ``m`` with the words after it."""
    cmd = m.commands[name]
    before, user = split_args(name, rest)
    if before[:1] in (["-h"], ["--help"]):
        print(describe(m, cmd))
        return 0
    if cmd.kind == "path":
        assert cmd.path is not None
        sub = mf.load(mf.find(cmd.path) or cmd.path / "fdl.yml", m.env, env_required=False)
        if before:
            if before[0] not in sub.commands:
                known = ", ".join(sub.commands) or "none"
                raise UsageError(
                    f"'{name}' has no command '{before[0]}' (commands: {known})",
                    hint=f"see: fdl {name} --help",
                )
            tail = before[1:] + (["--", *user] if "--" in rest else [])
            return run_command(sub, before[0], tail, gpus)
        if sub.entry:
            return _run_entry(sub, sub.config, user, gpus, name)
        raise UsageError(f"'{name}' needs a command", hint=f"see: fdl {name} --help")
    if before:
        raise UsageError(
            f"arguments for '{name}' go after '--': got {shlex.join(before)}",
            usage=f"usage: fdl {name} [-- ARGS...]\n",
            hint=f"fdl {name} -- {shlex.join(before)}",
        )
    if cmd.kind == "run":
        line = " ".join(x for x in (cmd.run, shlex.join(user), _append(cmd)) if x)
        con.info(con.bold(f"fdl {name}: ") + line)
        return call(line, cwd=m.dir, env=child_env(gpus, **_env_of(m)))
    merged = {s: _deep(m.config.get(s, {}), cmd.config.get(s, {})) for s in mf.SECTIONS}
    return _run_entry(m, merged, user, gpus, name)


def _env_of(m: mf.Manifest) -> dict[str, str]:
    return {"FDL_ENV": m.env} if m.env else {}


def _run_entry(
    m: mf.Manifest, config: dict[str, Any], user: list[str], gpus: list[int] | None, name: str
) -> int:
    assert m.entry is not None
    args = flags(config.get("options", {}), mf.ym.line_of(m.doc, ("entry",)))
    line = " ".join(x for x in (m.entry, shlex.join([*args, *user])) if x)
    con.info(con.bold(f"fdl {name}: ") + line)
    sections = {k: v for k, v in config.items() if k != "options" and v}
    env = child_env(gpus, **_env_of(m))
    if sections:
        env["FDL_CONFIG"] = json.dumps(sections)
    return call(line, cwd=m.dir, env=env)
