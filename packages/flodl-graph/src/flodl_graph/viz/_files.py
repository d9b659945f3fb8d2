"""Atomic text output for the files visualization writes (SVG, HTML, CSV)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["write_text_atomic"]


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temp file + ``os.replace``.

    A reader never sees a half-written file, and a failed write leaves any old file in place.
    """
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise FileNotFoundError(
            f"cannot write {str(p)!r}: directory {str(parent)!r} does not exist"
        )
    tmp = parent / f".{p.name}.{secrets.token_hex(6)}.tmp"
    # os.open with 0o666 lets the umask decide the mode, as for any new file (mkstemp would
    # leave the result readable by its owner only).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p
