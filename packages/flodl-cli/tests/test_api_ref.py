"""fdl api-ref: every name of every installed flodl package's __all__ appears."""

from __future__ import annotations

import importlib
import json

import pytest

from .conftest import Fdl

PACKAGES = ["flodl_core", "flodl_graph", "flodl_monitor", "flodl_hf", "flodl_cli"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_appears(fdl: Fdl, package: str) -> None:
    mod = pytest.importorskip(package)
    proc = fdl("api-ref", "--json", "--package", package, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (pkg,) = json.loads(proc.stdout)["packages"]
    names = [i["name"] for i in pkg["items"]]
    assert names == list(mod.__all__)
    md = fdl("api-ref", "--package", package.replace("_", "-"), timeout=300).stdout
    for name in mod.__all__:
        assert f"`{name}" in md


def test_entries_carry_signature_doc_and_source(fdl: Fdl) -> None:
    pytest.importorskip("flodl_graph")
    proc = fdl("api-ref", "--json", "--package", "graph", timeout=300)
    items = {i["name"]: i for i in json.loads(proc.stdout)["packages"][0]["items"]}
    fb = items["FlowBuilder"]
    assert fb["kind"] == "class" and fb["source"].startswith("flodl_graph/")
    assert fb["doc"] and fb["line"] >= 1
    assert any(m["name"] == "through" for m in fb["members"])
    importlib.import_module("flodl_graph")


def test_unknown_package(fdl: Fdl) -> None:
    proc = fdl("api-ref", "--package", "nope")
    assert proc.returncode == 2 and "not an installed flodl package" in proc.stderr
