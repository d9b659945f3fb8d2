"""Small file helpers: atomic writes (temp file in the same folder, then ``os.replace``)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path


def format_choices(values: Iterable[object]) -> str:
    """``a, b, c`` for error messages, sorted, or ``(none)``."""
    items = sorted(str(v) for v in values)
    return ", ".join(items) if items else "(none)"


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call ``write(tmp)`` on a temporary path next to ``path``, then move it into place.

    A crash or an exception leaves ``path`` as it was (readers never see a half-written file).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
