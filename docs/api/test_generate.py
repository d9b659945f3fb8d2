"""The generated API pages cover every exported name once, and the navigation names a page per
package. The static reading (griffe) is checked against the imported packages' ``__all__``."""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

pytest.importorskip("griffe", reason="griffelib is installed by the tests and docs sessions")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _load_hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("flodl_docs_api_generate", HERE / "_generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


gen = _load_hook()


def _nav_api_packages() -> list[str]:
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    return [m.group(1) for uri in gen._nav_pages(nav) if (m := gen.PAGE.match(uri))]


@pytest.mark.parametrize("package", _nav_api_packages())
def test_every_export_once(package: str) -> None:
    runtime = importlib.import_module(package)
    exported = [n for n in runtime.__all__ if not (n.startswith("__") and n.endswith("__"))]
    sections = gen.collect(package)
    placed = [n for s in sections for n in s.own] + [n for s in sections for n, _ in s.reexports]
    submodules = {n for n in exported if isinstance(getattr(runtime, n), ModuleType)}
    for name in exported:
        if name in submodules:
            continue
        assert placed.count(name) == 1, f"{package}.{name} placed {placed.count(name)} times"
    page = gen.render(package, sections)
    assert page.startswith(f"# `{package}`")
    for section in sections:
        assert f"::: {section.module}\n" in page


def test_grouping_by_public_module() -> None:
    sections = {s.module: s for s in gen.collect("flodl_core")}
    assert "clip_grad_norm" in sections["flodl_core.optim"].own  # defined in optim._clip
    assert "ConfigError" in sections["flodl_core"].own  # defined in flodl_core._errors
    assert "kaiming_normal" in sections["flodl_core.nn.init"].own  # a public submodule
    assert ("Linear", "torch.nn.Linear") in sections["flodl_core.nn"].reexports
    assert "Linear" not in sections["flodl_core.nn"].own


def test_public_home() -> None:
    assert gen._public_home("flodl_core.optim._clip.clip_grad_norm") == "flodl_core.optim"
    assert gen._public_home("flodl_core._errors.ConfigError") == "flodl_core"
    assert gen._public_home("flodl_core.nn.init.zeros") == "flodl_core.nn.init"


def test_nav_names_a_page_per_package() -> None:
    """Every installed flodl package has its API page, and every page the nav names exists (or
    is generated)."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    packages = set(_nav_api_packages())
    for src in (ROOT / "packages").glob("*/src/flodl_*"):
        assert src.name in packages, f"mkdocs.yml nav has no api/{src.name}.md"
    for uri in gen._nav_pages(nav):
        if not gen.PAGE.match(uri):
            assert (ROOT / "docs" / uri).is_file(), f"mkdocs.yml nav names missing docs/{uri}"


def test_page_pattern() -> None:
    assert re.fullmatch(gen.PAGE, "api/flodl_core.md")
    assert gen.PAGE.match("api/index.md") is None


def test_starred_lists_in_all(tmp_path: Path) -> None:
    """``__all__ = ["a", *_GROUP]`` expands the module-level list; an entry that cannot be read
    fails instead of dropping names from the reference."""
    pkg = tmp_path / "flodl_fake"
    pkg.mkdir()
    (pkg / "_impl.py").write_text("def a(): ...\ndef b(): ...\n")
    (pkg / "__init__.py").write_text(
        "from ._impl import a as a\nfrom ._impl import b as b\n"
        '_GROUP = ["b"]\n__all__ = ["a", *_GROUP]\n'
    )
    (section,) = gen.collect("flodl_fake", [str(tmp_path)])
    assert section.module == "flodl_fake" and sorted(section.own) == ["a", "b"]

    (pkg / "__init__.py").write_text(
        "from ._impl import a as a\nfrom ._impl import b as b\n"
        '_GROUP = ["b", 1]\n__all__ = ["a", *_GROUP]\n'
    )
    with pytest.raises(ValueError, match="cannot read the entry"):
        gen.collect("flodl_fake", [str(tmp_path)])
