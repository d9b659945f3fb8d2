"""Atomic text output for the files visualization writes (SVG, HTML, CSV)."""

from __future__ import annotations

import os
from pathlib import Path

from flodl_core import atomic_write, check_path

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` with :func:`flodl_core.atomic_write`.

    A reader never sees a half-written file, a failed write leaves any old file in place, and a
    new file gets the usual umask mode. The folder must exist.
    :class:`~flodl_core.ConfigError` when ``path`` is not a path (``None``, a number).
    """
    return atomic_write(check_path(path, "the output path"), text)
