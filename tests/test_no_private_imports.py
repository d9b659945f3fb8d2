"""No package imports another package's private modules.

Each package's ``_modules`` are its own business behind a curated ``__init__``; another package
(or ddp-bench, or a benchmark) that needs something from them needs it to have a public name.
The scan reads every ``.py`` file of ``packages/*/src``, ``ddp-bench/src`` and ``benchmarks``
with :mod:`ast` and flags, outside package X: ``import X._m``, ``from X._m import n``,
``from X import _m`` and ``importlib.import_module("X._m")``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("flodl_core", "flodl_graph", "flodl_monitor", "flodl_ddp", "flodl_hf", "flodl_cli")
TOPS = (*PACKAGES, "ddp_bench")

# Imports waiting for a public name in flodl_ddp (its runtime is being rebuilt elsewhere): each
# entry must still be needed (a test below fails once it is not), and nothing may join the list.
PENDING: set[tuple[str, str]] = set()


def _private(module: str) -> str | None:
    """``flodl_ddp._comm.x`` -> ``flodl_ddp._comm``: the module up to its first private part,
    when ``module`` belongs to one of the scanned packages; else None."""
    parts = module.split(".")
    if parts[0] not in TOPS:
        return None
    for i, part in enumerate(parts[1:], start=1):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            return ".".join(parts[: i + 1])
    return None


def own_package(path: Path, root: Path = ROOT) -> str | None:
    """The import package a file belongs to (``packages/flodl-ddp/src/flodl_ddp/x.py`` ->
    ``flodl_ddp``), or None for a file of no package (a benchmark script)."""
    rel = path.relative_to(root).parts
    if rel[0] == "packages" and len(rel) > 3 and rel[2] == "src":
        return rel[3]
    if rel[:2] == ("ddp-bench", "src") and len(rel) > 2:
        return rel[2]
    return None


def violations(path: Path, root: Path = ROOT) -> list[tuple[int, str, str]]:
    """``(line, statement, private module)`` for each import of another package's private
    module in ``path``."""
    own = own_package(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str, str]] = []

    def check(line: int, module: str, text: str) -> None:
        hidden = _private(module)
        if hidden is not None and hidden.split(".")[0] != own:
            found.append((line, text, hidden))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(node.lineno, alias.name, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            text = f"from {node.module} import {', '.join(a.name for a in node.names)}"
            if _private(node.module) is not None:
                check(node.lineno, node.module, text)
            else:  # from X import _m: the names themselves may be private modules
                for alias in node.names:
                    check(node.lineno, f"{node.module}.{alias.name}", text)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func, arg = node.func, node.args[0].value
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(arg, str):
                check(node.lineno, arg, f"{name}({arg!r})")
    return found


def scanned_files(root: Path = ROOT) -> list[Path]:
    files = [*root.glob("packages/*/src/**/*.py"), *root.glob("ddp-bench/src/**/*.py")]
    files += root.glob("benchmarks/**/*.py")
    return sorted(files)


def _report(root: Path = ROOT) -> list[tuple[str, int, str, str]]:
    out = []
    for path in scanned_files(root):
        rel = path.relative_to(root).as_posix()
        out += [(rel, line, text, hidden) for line, text, hidden in violations(path, root)]
    return out


def test_no_package_imports_another_packages_private_modules() -> None:
    bad = [v for v in _report() if (v[0], v[3]) not in PENDING]
    assert not bad, "imports of another package's private modules:\n" + "\n".join(
        f"{rel}:{line}: {text} ({hidden} is private to {hidden.split('.')[0]}; "
        "export what is needed from its __init__ and import that)"
        for rel, line, text, hidden in bad
    )


def test_pending_entries_are_still_needed() -> None:
    seen = {(v[0], v[3]) for v in _report()}
    stale = sorted(PENDING - seen)
    assert not stale, f"no longer imported, remove from PENDING: {stale}"


@pytest.mark.parametrize(
    ("where", "source", "caught"),
    [
        ("packages/flodl-cli/src/flodl_cli/x.py", "from flodl_ddp._comm import Comm\n", True),
        ("packages/flodl-cli/src/flodl_cli/x.py", "import flodl_ddp._launch as l\n", True),
        ("packages/flodl-cli/src/flodl_cli/x.py", "from flodl_ddp import _admission\n", True),
        ("packages/flodl-cli/src/flodl_cli/x.py", "from flodl_hf.models._bert import B\n", True),
        (
            "packages/flodl-cli/src/flodl_cli/x.py",
            "m = importlib.import_module('flodl_core._x')\n",
            True,
        ),
        ("benchmarks/b.py", "from ddp_bench._runner import run\n", True),
        ("packages/flodl-ddp/src/flodl_ddp/x.py", "from flodl_ddp._comm import Comm\n", False),
        ("packages/flodl-ddp/src/flodl_ddp/x.py", "from ._comm import Comm\n", False),
        (
            "packages/flodl-cli/src/flodl_cli/x.py",
            "from flodl_ddp import Trainer, __version__\n",
            False,
        ),
        ("packages/flodl-cli/src/flodl_cli/x.py", "from torch._C import _x\n", False),
        (
            "packages/flodl-cli/src/flodl_cli/x.py",
            "s = 'python -m flodl_ddp._cluster_node'\n",
            False,
        ),
    ],
)
def test_the_scan_catches_each_form(tmp_path: Path, where: str, source: str, caught: bool) -> None:
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    found = violations(path, tmp_path)
    assert bool(found) is caught, found
    assert [f.relative_to(tmp_path).as_posix() for f in scanned_files(tmp_path)] == [where]
