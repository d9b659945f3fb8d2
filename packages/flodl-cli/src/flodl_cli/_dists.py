"""Installed distributions, read without importing them (and without importing torch).

``importlib.metadata`` costs tens of milliseconds to import; ``fdl --version`` and ``fdl --help``
only need names and versions, which the ``NAME-VERSION.dist-info`` folder names on ``sys.path``
already say.
"""

from __future__ import annotations

import os
import re
import sys

FLODL_DISTS = ("flodl-core", "flodl-graph", "flodl-monitor", "flodl-ddp", "flodl-hf", "flodl-cli")
CLI_VERSION = "0.1.0"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def installed_versions(names: tuple[str, ...] = FLODL_DISTS) -> dict[str, str]:
    """``{distribution: version}`` for those of ``names`` that are installed (first on sys.path
    wins, as for imports)."""
    wanted = {_norm(n): n for n in names}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            listing = os.listdir(entry or ".")
        except OSError:
            continue
        for item in listing:
            if not item.endswith(".dist-info"):
                continue
            stem = item[: -len(".dist-info")]
            name, _, version = stem.partition("-")
            key = _norm(name)
            if key in wanted and wanted[key] not in found:
                found[wanted[key]] = version
    return {n: found[n] for n in names if n in found}


def version_of(name: str) -> str | None:
    """The installed version of one distribution, or ``None``."""
    return installed_versions((name,)).get(name)


def flodl_release() -> str:
    """The flodl release this environment is on: flodl-core's version, else this CLI's."""
    return version_of("flodl-core") or CLI_VERSION


def pins(dist: str) -> list[str]:
    """The ``flodl-*`` requirements ``dist`` declares (e.g. ``["flodl-core==0.1.0"]``)."""
    from importlib import metadata

    try:
        reqs = metadata.requires(dist) or []
    except metadata.PackageNotFoundError:
        return []
    return [r.split(";")[0].replace(" ", "") for r in reqs if r.startswith("flodl-")]
