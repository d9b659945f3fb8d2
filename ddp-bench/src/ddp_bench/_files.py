"""Atomic writes through :func:`flodl_core.atomic_write`, creating the folder first."""

from __future__ import annotations

from pathlib import Path

from flodl_core import atomic_write


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that no reader ever sees a half-written file."""
    return atomic_write(path, data, parents=True)


def write_text_atomic(path: Path, text: str) -> Path:
    return atomic_write(path, text, parents=True)
