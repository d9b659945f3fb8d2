"""Finding the flodl workspace (the folder holding ``noxfile.py`` and ``examples/``)."""

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


def project_dir() -> Path:
    """The project ``fdl`` works on: ``FDL_ROOT`` (exported by a project's ``./fdl``) when the
    working directory is outside it, else the working directory."""
    here = Path.cwd().resolve()
    env = os.environ.get("FDL_ROOT")
    if env:
        root = Path(env).resolve()
        if root != here and root not in here.parents:
            return root
    return here
