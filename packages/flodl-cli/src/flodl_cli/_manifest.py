"""``fdl.yml``: finding it, loading it with its overlay, and checking it.

A manifest holds ``description``, ``commands`` and, in a sub-directory reached through a
``path`` command, an ``entry`` with the config sections its presets merge over::

    description: my project
    entry: python train.py          # what presets call
    options: {epochs: 10}           # passed to the entry as --epochs 10
    commands:
      train: {run: python train.py, append: --out runs/latest}
      bench: {path: benchmarks}     # benchmarks/fdl.yml, recursively
      quick: {options: {epochs: 1}} # preset: entry with options merged over the parent's

Overlays ``fdl.<env>.yml`` next to it are deep-merged over it. Every error names the file, the
line and the key, and says what is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import _yamlmarks as ym
from ._errors import CliError
from ._workspace import bootstrap_project

NAMES = ("fdl.yml", "fdl.yaml", "fdl.json")
TOP_KEYS = ("description", "entry", "commands", "options", "training", "ddp", "output")
SECTIONS = ("options", "training", "ddp", "output")
COMMAND_KEYS = ("description", "run", "append", "path", *SECTIONS)
DDP_KEYS = (
    "mode", "policy", "backend", "anchor", "max_anchor", "overhead_target",
    "divergence_threshold", "max_batch_diff", "speed_hint", "partition_ratios", "progressive",
    "max_grad_norm", "lr_scale_ratio", "snapshot_timeout", "checkpoint_every", "timeline",
)  # fmt: skip
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Built-in commands a manifest may not shadow (`run` and `test` it may: they are defaults).
RESERVED = frozenset(
    {"setup", "init", "config", "diagnose", "probe", "api-ref", "add", "hf", "ddp-bench",
     "completions", "docs", "help", "__complete"}
)  # fmt: skip


@dataclass
class Command:
    """One manifest command; ``kind`` is ``run``, ``path`` or ``preset``."""

    name: str
    kind: str
    where: str
    description: str = ""
    run: str | None = None
    append: str | list[str] | None = None
    path: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Manifest:
    file: Path
    env: str | None
    doc: ym.Doc
    description: str = ""
    entry: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    commands: dict[str, Command] = field(default_factory=dict)

    @property
    def dir(self) -> Path:
        return self.file.parent


def find(start: Path | None = None) -> Path | None:
    """The nearest manifest at or above ``start`` (default: the working directory).

    When the ``./fdl`` bootstrap of a project is called from outside that project, it exports
    ``FDL_ROOT``; the search then starts there instead. A flodl clone's bootstrap exports it too,
    but for the workspace only: its ``fdl`` searches from the working directory.
    """
    here = (start or Path.cwd()).resolve()
    root = bootstrap_project() if start is None else None
    if root is not None and root != here and root not in here.parents:
        here = root
    for folder in (here, *here.parents):
        for name in NAMES:
            if (folder / name).is_file():
                return folder / name
    return None


def announce(file: Path) -> None:
    """Name the manifest in use on stderr when it is not the working directory's own (found in
    a parent folder, or the project of the ``./fdl`` that was called): one line, none with -q."""
    from . import _console as con

    if file.parent.resolve() != Path.cwd().resolve():
        con.info(f"fdl: using {file.resolve()}")


def envs(folder: Path) -> list[str]:
    """The overlay names available in ``folder`` (``fdl.ci.yml`` -> ``ci``)."""
    found = set()
    for p in folder.glob("fdl.*.y*ml"):
        parts = p.name.split(".")
        if len(parts) == 3 and parts[2] in ("yml", "yaml"):
            found.add(parts[1])
    return sorted(found)


def overlay_file(folder: Path, env: str) -> Path | None:
    for ext in ("yml", "yaml"):
        if (folder / f"fdl.{env}.{ext}").is_file():
            return folder / f"fdl.{env}.{ext}"
    return None


def load(file: Path, env: str | None = None, *, env_required: bool = True) -> Manifest:
    """Load and check ``file``, with ``fdl.<env>.yml`` deep-merged over it when ``env`` is set.

    A missing overlay is an error for the top manifest (``env_required``) and ignored for the
    sub-directory manifests it reaches.
    """
    doc = ym.load(file, _label(file))
    if env:
        if not re.fullmatch(r"[A-Za-z0-9_-]+", env):
            raise CliError(f"environment name {env!r}: use letters, digits, '-' or '_'", code=2)
        over = overlay_file(file.parent, env)
        if over is not None:
            doc = ym.merge(doc, ym.load(over, _label(over)))
        elif env_required:
            have = ", ".join(envs(file.parent)) or "none"
            raise CliError(
                f"no overlay fdl.{env}.yml next to {_label(file)} (environments here: {have})",
                fix=f"create {file.parent / f'fdl.{env}.yml'} or drop --env/@{env}/FDL_ENV",
                code=2,
            )
    return _check(file, env, doc)


def _label(file: Path) -> str:
    try:
        return str(file.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(file)


def _bad(doc: ym.Doc, path: ym.Path_, message: str) -> CliError:
    key = ".".join(str(p) for p in path) or "(top level)"
    return CliError(f"{ym.line_of(doc, path)}: {key}: {message}", code=2)


def _check(file: Path, env: str | None, doc: ym.Doc) -> Manifest:
    data = doc.data if doc.data is not None else {}
    if not isinstance(data, dict):
        raise _bad(doc, (), f"a manifest is a mapping of {', '.join(TOP_KEYS)}")
    for key in data:
        if key not in TOP_KEYS:
            raise _bad(doc, (key,), f"unknown key; allowed: {', '.join(TOP_KEYS)}")
    m = Manifest(file=file, env=env, doc=doc)
    m.description = _text(doc, data, ("description",))
    m.entry = _text(doc, data, ("entry",)) or None
    m.config = _sections(doc, data, ())
    commands = data.get("commands") or {}
    if not isinstance(commands, dict):
        raise _bad(doc, ("commands",), "expected a mapping of command name -> command")
    for name, spec in commands.items():
        m.commands[str(name)] = _command(doc, file.parent, str(name), spec, m)
    return m


def _text(doc: ym.Doc, data: dict[str, Any], path: ym.Path_) -> str:
    value = data.get(path[-1])
    if value is None:
        return ""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise _bad(doc, path, f"expected a string, got {type(value).__name__}")
    return str(value)


def _sections(doc: ym.Doc, data: dict[str, Any], path: ym.Path_) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for sec in SECTIONS:
        value = data.get(sec)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _bad(doc, (*path, sec), f"expected a mapping, got {type(value).__name__}")
        if sec == "ddp":
            for k in value:
                if k not in DDP_KEYS:
                    raise _bad(
                        doc, (*path, sec, k), f"unknown ddp key; allowed: {', '.join(DDP_KEYS)}"
                    )
        out[sec] = value
    return out


def _command(doc: ym.Doc, folder: Path, name: str, spec: Any, m: Manifest) -> Command:
    path: ym.Path_ = ("commands", name)
    where = ym.line_of(doc, path)
    _check_command_name(doc, path, name)
    if spec is None:  # empty entry: a sibling directory with its own fdl.yml
        if not any((folder / name / n).is_file() for n in NAMES):
            raise _bad(
                doc, path, f"empty command needs {folder / name}/fdl.yml (or give run:/path:)"
            )
        return Command(name, "path", where, path=folder / name)
    if isinstance(spec, str):
        spec = {"run": spec}
    if not isinstance(spec, dict):
        raise _bad(doc, path, "expected a mapping with one of run:, path: or a preset section")
    _check_command_keys(doc, path, spec)
    config = _sections(doc, spec, path)
    kinds = [k for k in ("run", "path") if spec.get(k) is not None] + (["preset"] if config else [])
    if len(kinds) != 1:
        what = " and ".join(kinds) if kinds else "none"
        raise _bad(
            doc, path, f"a command is exactly one kind: run:, path: or a preset "
            f"({', '.join(SECTIONS)}); this one has {what}"
        )  # fmt: skip
    cmd = Command(name, kinds[0], where, description=_text(doc, spec, (*path, "description")))
    if "append" in spec and cmd.kind != "run":
        raise _bad(doc, (*path, "append"), "append: only goes with run:")
    if cmd.kind == "run":
        cmd.run = _text(doc, spec, (*path, "run"))
        cmd.append = _append(doc, spec.get("append"), (*path, "append"))
    elif cmd.kind == "path":
        target = folder / _text(doc, spec, (*path, "path"))
        if not any((target / n).is_file() for n in NAMES):
            raise _bad(doc, (*path, "path"), f"no fdl.yml in {target}")
        cmd.path = target
    else:
        if not m.entry:
            raise _bad(
                doc, path, "a preset calls the manifest's entry:, and this manifest has none"
            )
        cmd.config = config
    return cmd


def _check_command_name(doc: ym.Doc, path: ym.Path_, name: str) -> None:
    """Reject a command name fdl cannot dispatch: bad characters, or a built-in's name."""
    if not _NAME.fullmatch(name):
        raise _bad(doc, path, "a command name uses letters, digits, '.', '_' or '-'")
    if name in RESERVED:
        raise _bad(doc, path, f"'{name}' is a built-in fdl command; rename this one")


def _check_command_keys(doc: ym.Doc, path: ym.Path_, spec: dict[str, Any]) -> None:
    """Reject a key a command entry does not know, naming the ones it does."""
    for key in spec:
        if key not in COMMAND_KEYS:
            raise _bad(doc, (*path, key), f"unknown key; allowed: {', '.join(COMMAND_KEYS)}")


def _append(doc: ym.Doc, append: Any, path: ym.Path_) -> str | list[str] | None:
    """A run: command's ``append:`` value: a string, a list of scalars (as strings), or None."""
    if append is None or isinstance(append, str):
        return append
    if isinstance(append, list) and all(isinstance(a, (str, int, float)) for a in append):
        return [str(a) for a in append]
    raise _bad(doc, path, "expected a string or a list of strings")
