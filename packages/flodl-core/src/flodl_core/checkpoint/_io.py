"""File plumbing shared by checkpoints and state files: gzip by suffix, atomic writes.

The path decides compression in both directions (``*.gz`` is a gzip stream, anything else is
raw), as in floDl (Rust), so a file moves between the two worlds unchanged.
"""

from __future__ import annotations

import errno
import gzip
import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import BinaryIO

from .._atomic import atomic_open
from .._errors import CheckpointError

PathLike = str | os.PathLike[str]

_GZIP_MAGIC = b"\x1f\x8b"
# Same default as flate2 in the Rust writer: level 9 costs ~3x the time for ~1% on float data.
_GZIP_LEVEL = 6
_WRITE_BUFFER = 1 << 20


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """A checkpoint or state file does not exist. ``filename`` holds the path."""

    def __init__(self, path: str, what: str = "checkpoint") -> None:
        FileNotFoundError.__init__(self, errno.ENOENT, f"{what} not found", path)


def is_gzip_path(path: str) -> bool:
    return path.endswith(".gz")


@contextmanager
def open_read(
    path: PathLike, what: str = "checkpoint", *, mapped: bool = False
) -> Iterator[tuple[BinaryIO, int | None]]:
    """Open ``path`` for reading: ``(stream, size)``; ``size`` is ``None`` for gzip streams.

    With ``mapped``, a plain non-empty file comes back as a copy-on-write ``mmap``: buffers taken
    from it are writable views that never write back, and it stays open for as long as any view
    does (``torch.frombuffer`` tensors over it included).

    A missing file raises :class:`CheckpointNotFoundError`; a ``.gz`` path holding something
    other than gzip data raises :class:`CheckpointError` before any parsing.
    """
    path = os.fspath(path)
    try:
        raw = open(path, "rb")  # noqa: SIM115 - closed below, after the gzip wrapper
    except FileNotFoundError:
        raise CheckpointNotFoundError(path, what) from None
    except IsADirectoryError:
        raise CheckpointError(
            f"{what} {path} is a directory; give the path of the file in it"
        ) from None
    try:
        if not is_gzip_path(path):
            size = os.fstat(raw.fileno()).st_size
            if not mapped or size == 0:  # an empty file cannot be mapped
                yield raw, size
                return
            mm = mmap.mmap(raw.fileno(), 0, access=mmap.ACCESS_COPY)
            try:
                yield mm, size  # type: ignore[misc]
            finally:
                with suppress(BufferError):  # views still alive keep it mapped until released
                    mm.close()
            return
        head = raw.read(2)
        if head != _GZIP_MAGIC:
            raise CheckpointError(
                f"{what} {path}: the name ends with .gz but the file is not gzip data "
                f"(it starts with {head + raw.read(2)!r})"
            )
        raw.seek(0)
        with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            yield gz, None  # type: ignore[misc]
    finally:
        raw.close()


@contextmanager
def atomic_write(path: PathLike) -> Iterator[BinaryIO]:
    """A stream whose bytes appear at ``path`` only if the ``with`` block completes.

    :func:`flodl_core.atomic_open` underneath (temp file in the same folder, fsync,
    ``os.replace``; on any error the temp file is removed and an existing file is left as it was),
    plus gzip compression when the path ends ``.gz``.
    """
    path = os.fspath(path)
    with atomic_open(path, buffering=_WRITE_BUFFER) as raw:
        if is_gzip_path(path):
            # filename="" and mtime=0 keep the temp name and the clock out of the gzip header:
            # the same state always gives the same bytes.
            with gzip.GzipFile(
                filename="", mode="wb", fileobj=raw, compresslevel=_GZIP_LEVEL, mtime=0
            ) as gz:
                yield gz  # type: ignore[misc]
        else:
            yield raw
