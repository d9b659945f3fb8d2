"""Lock-step release check between flodl packages.

flodl's packages are published together with exact pins between siblings. An environment where
one was upgraded alone (``pip install -U flodl-graph`` with an older ``flodl-core`` left behind by
``--no-deps``) would fail in confusing ways later, so each package checks at import time that the
siblings it uses are of its own release.
"""

from __future__ import annotations

from importlib import metadata

from ._errors import VersionMismatchError

__version__ = "0.1.0"


def check_siblings(package: str, version: str, siblings: tuple[str, ...] = ("flodl-core",)) -> None:
    """Raise :class:`VersionMismatchError` unless every sibling distribution is at ``version``.

    A sibling that is not installed as a distribution (a source checkout on ``sys.path``) is
    accepted: there is no metadata to compare against.
    """
    bad: list[str] = []
    for dist in siblings:
        try:
            found = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        if found != version:
            bad.append(f"{dist}=={found}")
    if bad:
        pins = " ".join(f"{d}=={version}" for d in siblings)
        raise VersionMismatchError(
            f"{package} {version} needs its flodl siblings at the same release, found "
            f"{', '.join(bad)}; fix with: pip install {package}=={version} {pins}"
        )
