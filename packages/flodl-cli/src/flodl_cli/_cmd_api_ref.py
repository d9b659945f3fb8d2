"""``fdl api-ref [--json] [--package P]``: the public API of the installed flodl packages.

Names come from each package's ``__all__``; for each: kind, signature, the first line of its
docstring and its source file, read with :mod:`inspect` (classes list their public methods).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
from pathlib import Path
from typing import Any

from ._dists import FLODL_DISTS, installed_versions
from ._errors import CliError
from ._parser import _found


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("api-ref", help="API reference of the installed flodl packages")
    p.description = "Public API of the installed flodl packages (names from __all__)."
    p.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    p.add_argument("--package", metavar="P", help="one package: flodl-core, flodl_graph, hf, ...")


def _module_name(p: str) -> str:
    name = p.replace("-", "_")
    return name if name.startswith("flodl_") else f"flodl_{name}"


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _source(obj: Any, root: Path) -> tuple[str, int | None]:
    try:
        file = inspect.getsourcefile(obj)
        line = inspect.getsourcelines(obj)[1]
    except (TypeError, OSError):
        return "", None
    if file is None:
        return "", None
    try:
        return str(Path(file).resolve().relative_to(root)), line
    except ValueError:
        return file, line


def _kind(obj: Any) -> str:
    if inspect.isclass(obj):
        return "class"
    if inspect.isfunction(obj) or inspect.isbuiltin(obj) or callable(obj):
        return "function"
    if inspect.ismodule(obj):
        return "module"
    return "constant"


def describe_package(module_name: str) -> dict[str, Any]:
    mod = importlib.import_module(module_name)
    root = Path(mod.__file__ or ".").resolve().parent.parent
    items = []
    for name in getattr(mod, "__all__", []):
        obj = getattr(mod, name)
        kind = _kind(obj)
        src, line = _source(obj, root) if kind in ("class", "function") else ("", None)
        item: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "signature": _signature(obj) if kind in ("class", "function") else "",
            "doc": _doc(obj) if kind != "constant" else repr(obj)[:80],
            "source": src,
            "line": line,
        }
        if kind == "class":
            item["members"] = [
                {"name": m, "signature": _signature(v), "doc": _doc(v)}
                for m, v in vars(obj).items()
                if not m.startswith("_")
                and (inspect.isfunction(v) or isinstance(v, (property, classmethod, staticmethod)))
            ]
        items.append(item)
    dist = module_name.replace("_", "-")
    return {"package": module_name, "version": installed_versions().get(dist, ""), "items": items}


def to_markdown(packages: list[dict[str, Any]]) -> str:
    out: list[str] = []
    for pkg in packages:
        out.append(f"# {pkg['package']} {pkg['version']}\n")
        for it in pkg["items"]:
            where = f" — `{it['source']}:{it['line']}`" if it["source"] else ""
            out.append(f"## `{it['name']}{it['signature']}` ({it['kind']}){where}\n")
            if it["doc"]:
                out.append(f"{it['doc']}\n")
            for m in it.get("members", []):
                out.append(
                    f"- `{m['name']}{m['signature']}`" + (f": {m['doc']}" if m["doc"] else "")
                )
            if it.get("members"):
                out.append("")
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    installed = [d.replace("-", "_") for d in FLODL_DISTS if _found(d.replace("-", "_"))]
    if args.package:
        name = _module_name(args.package)
        if name not in installed:
            raise CliError(
                f"--package {args.package!r}: not an installed flodl package "
                f"(installed: {', '.join(installed)})",
                code=2,
            )
        installed = [name]
    packages, failed = [], []
    for name in installed:
        try:
            packages.append(describe_package(name))
        except Exception as e:  # one broken package should not hide the others
            failed.append(f"{name}: {type(e).__name__}: {e}")
    if args.json:
        print(json.dumps({"packages": packages, "errors": failed}, indent=2))
    else:
        print(to_markdown(packages))
    for line in failed:
        print(f"fdl: error: could not import {line}", file=__import__("sys").stderr)
    return 1 if failed else 0
