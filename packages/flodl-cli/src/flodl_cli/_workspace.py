"""Finding the flodl workspace (the folder holding ``noxfile.py`` and ``examples/``), the flodl
clone this ``fdl`` runs from, and the project a ``./fdl`` bootstrap points at.

Both bootstraps export their folder as ``FDL_ROOT``: a clone's ``./fdl`` so that ``fdl run`` and
``fdl test`` find the workspace from anywhere, a project's ``./fdl`` so that ``fdl`` uses that
project's ``fdl.yml`` when called from outside it. Only the second redirects the project.
"""

from __future__ import annotations

import os
from pathlib import Path


def find_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: the working directory) that holds
    ``noxfile.py``; ``FDL_ROOT`` overrides the search. ``None`` when there is none."""
    env = os.environ.get("FDL_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "noxfile.py").is_file():
            return folder
    return None


def is_flodl_clone(folder: Path) -> bool:
    """Whether ``folder`` is a clone of flodl's sources (its packages under ``packages/``)."""
    return (folder / "packages" / "flodl-cli" / "pyproject.toml").is_file()


def source_clone() -> Path | None:
    """The flodl clone this ``fdl`` runs from (an editable install of its
    ``packages/flodl-cli``), or ``None`` for an ``fdl`` installed from a wheel."""
    # <clone>/packages/flodl-cli/src/flodl_cli/_workspace.py
    here = Path(__file__).resolve()
    clone = here.parents[4] if len(here.parents) > 4 else None
    if clone is None or here.parents[2] != clone / "packages" / "flodl-cli":
        return None
    return clone if is_flodl_clone(clone) else None


def bootstrap_project() -> Path | None:
    """The project whose ``./fdl`` started this ``fdl`` (``FDL_ROOT``), or ``None``: also when
    ``FDL_ROOT`` is a flodl clone, whose bootstrap exports it for :func:`find_root` only (so the
    clone's ``fdl``, called inside a project, works on that project)."""
    env = os.environ.get("FDL_ROOT")
    if not env:
        return None
    root = Path(env).resolve()
    return None if is_flodl_clone(root) else root


def project_dir() -> Path:
    """The project ``fdl`` works on: the project of the ``./fdl`` that started it when the
    working directory is outside that project, else the working directory."""
    here = Path.cwd().resolve()
    root = bootstrap_project()
    if root is not None and root != here and root not in here.parents:
        return root
    return here
