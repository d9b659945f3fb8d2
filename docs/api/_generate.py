"""MkDocs hook: the API reference pages, generated at build time from each package's ``__all__``.

The navigation names the pages (``api/flodl_core.md``, ...); for every such page that does not
exist on disk this hook writes one, grouping the exported names by the public module that
defines them (``flodl_core.optim``, ``flodl_core.nn.init``, ...). flodl objects are rendered by
mkdocstrings from their docstrings; names re-exported from PyTorch are listed in a table that
points to PyTorch's reference, since their documentation lives there.

The packages are read statically with griffe (no import, so no torch needed to build the docs).
The hook checks that every exported name lands on the page exactly once.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]
PAGE = re.compile(r"^api/(flodl_[a-z_]+|ddp_bench)\.md$")
TORCH_DOCS = "https://docs.pytorch.org/docs/stable/"


@dataclass
class Section:
    """One public module on a page: the flodl names it documents, the torch names it re-exports."""

    module: str
    own: list[str] = field(default_factory=list)
    reexports: list[tuple[str, str]] = field(default_factory=list)  # (name, torch path)


def search_paths(root: Path = ROOT) -> list[str]:
    """Every package's ``src`` folder (``packages/*/src``) plus ``ddp-bench/src`` if present."""
    found = sorted(str(p) for p in root.glob("packages/*/src") if p.is_dir())
    bench = root / "ddp-bench" / "src"
    if bench.is_dir():
        found.append(str(bench))
    return found


def _public_home(path: str) -> str:
    """``flodl_core.optim._clip.clip_grad_norm`` -> ``flodl_core.optim``: the module path up to
    the first private component (the object's name itself is dropped)."""
    parts = path.split(".")[:-1]
    keep: list[str] = []
    for part in parts:
        if part.startswith("_"):
            break
        keep.append(part)
    return ".".join(keep)


def _final_path(
    obj: griffe.Object | griffe.Alias, package: str, loader: griffe.GriffeLoader
) -> str:
    """Follow an alias chain to where the object is defined, without loading other packages."""
    seen: set[str] = set()
    while obj.is_alias:
        target = obj.target_path
        if target.split(".")[0] != package or target in seen:
            return target
        seen.add(target)
        try:
            obj = loader.modules_collection.get_member(target)
        except (KeyError, ValueError):
            return target
    return obj.path


def _public_modules(module: griffe.Module) -> list[griffe.Module]:
    """The module and its public submodules (recursively) that declare ``__all__``."""
    found = [module] if module.exports is not None else []
    for name, member in module.members.items():
        if name.startswith("_") or member.is_alias or not member.is_module:
            continue
        found.extend(_public_modules(member))
    return found


def _export_names(module: griffe.Module) -> list[str]:
    """``module.__all__`` as names. griffe expands ``*submodule.__all__`` itself; a starred
    module-level list (``__all__ = [..., *_GROUP]``) is expanded here from its literal value.
    Anything else is an error: a name silently left out would vanish from the reference."""
    names: list[str] = []
    for entry in module.exports or []:
        if isinstance(entry, str):
            names.append(entry)
            continue
        source = module.members.get(getattr(entry, "name", ""))
        try:
            value = ast.literal_eval(str(source.value)) if source is not None else None
        except (ValueError, SyntaxError):
            value = None
        if not (isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)):
            raise ValueError(
                f"{module.path}.__all__: cannot read the entry {entry!s}; list names as strings "
                "or star a module-level list of strings"
            )
        names.extend(value)
    return names


def collect(package: str, paths: list[str] | None = None) -> list[Section]:
    """Group ``package``'s exported names by the public module that defines them.

    A flodl object goes to the public module its definition lives under, when that module
    exports it, else to the deepest module that exports it; a re-exported torch object goes to
    the deepest module that exports it. Submodules listed in ``__all__`` get their own section.
    """
    loader = griffe.GriffeLoader(search_paths=paths or search_paths())
    root = loader.load(package)
    loader.resolve_aliases(implicit=False, external=False)
    modules = {m.path: m for m in _public_modules(root)}

    # name -> every public module exporting it
    exporters: dict[str, list[str]] = {}
    for path, module in modules.items():
        for name in _export_names(module):
            if not (name.startswith("__") and name.endswith("__")):
                exporters.setdefault(name, []).append(path)

    sections = {path: Section(path) for path in modules}
    for name, where in exporters.items():
        deepest = max(where, key=lambda p: p.count("."))
        member = modules[deepest].members.get(name)
        if member is None:
            raise ValueError(f"{deepest}.__all__ names {name!r}, which the module does not define")
        if member.is_alias and member.target_path in modules:
            continue  # a submodule listed in __all__: documented as its own section
        final = _final_path(member, package, loader)
        if final.split(".")[0] != package:
            sections[deepest].reexports.append((name, final))
            continue
        home = _public_home(final)
        sections[home if home in where else deepest].own.append(name)
    return [s for s in sections.values() if s.own or s.reexports]


def _torch_table(section: Section) -> str:
    rows = "\n".join(f"| `{name}` | `{target}` |" for name, target in section.reexports)
    return (
        f"Re-exported from PyTorch unchanged (documented in the [PyTorch reference]({TORCH_DOCS})):"
        f"\n\n| name | PyTorch object |\n|---|---|\n{rows}\n"
    )


def render(package: str, sections: list[Section]) -> str:
    """The Markdown of one package page: a heading per public module, its docstring, then its
    members rendered by mkdocstrings and its torch re-exports as a table."""
    out = [f"# `{package}`\n"]
    for section in sections:
        members = "".join(f"        - {name}\n" for name in section.own)
        listing = f"      members:\n{members}" if members else "      members: false\n"
        out.append(f"## `{section.module}`\n")
        out.append(
            f"::: {section.module}\n    options:\n      show_root_heading: false\n"
            f"      heading_level: 3\n{listing}"
        )
        if section.reexports:
            out.append(_torch_table(section))
    return "\n".join(out)


def page_for(package: str) -> str:
    return render(package, collect(package))


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def on_files(files: Any, config: Any) -> Any:
    """Add a generated page for every ``api/<package>.md`` in the navigation not on disk."""
    from mkdocs.structure.files import File

    for uri in _nav_pages(config["nav"]):
        match = PAGE.match(uri)
        if match is None or files.get_file_from_path(uri) is not None:
            continue
        files.append(File.generated(config, uri, content=page_for(match.group(1))))
    return files
