"""The MIT license: one text at the root and in every package folder, declared for the wheel.

Each ``packages/*/pyproject.toml`` lists its ``LICENSE`` in ``license-files`` (PEP 639), so the
wheel carries it as ``<dist>.dist-info/licenses/LICENSE`` (checked by building the wheels: that
needs the build backend from the package index, so it is not done here).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())


def test_the_root_license_is_mit_by_the_flodl_authors() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} the flodl authors$", text, re.MULTILINE)
    assert "Permission is hereby granted, free of charge" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text


@pytest.mark.parametrize("package", PACKAGES, ids=[p.name for p in PACKAGES])
def test_every_package_ships_the_same_license(package: Path) -> None:
    assert (package / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    if sys.version_info < (3, 11):
        pytest.skip("tomllib arrived in Python 3.11")
    import tomllib

    config = tomllib.loads((package / "pyproject.toml").read_text())
    project = config["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    # license-files as a list of paths is PEP 639, which hatchling reads from 1.27 on.
    requires = config["build-system"]["requires"]
    assert any(re.fullmatch(r"hatchling>=1\.(2[7-9]|[3-9]\d)(\.\d+)?", r) for r in requires)
