"""Atomic file writes: every file flodl writes appears whole or not at all.

One mechanism behind three entry points:

- :func:`atomic_path` yields a temp path next to the target, for libraries that write by file
  name (``safetensors.torch.save_file``);
- :func:`atomic_open` yields a binary stream;
- :func:`atomic_write` writes ``bytes`` or ``str`` in one call.

The temp file sits in the target's folder, so the final ``os.replace`` is a rename within one
filesystem, which POSIX and Windows both make atomic. It is fsynced before the rename (else a
crash could leave a complete-looking name over incomplete data) and the folder after it (so the
rename itself survives a crash). On any error the temp file is removed and an existing file at
the target is left as it was.

A new file gets the usual mode of a new file, ``0o666 & ~umask``: the temp file is created with
``os.open(..., 0o666)`` rather than ``tempfile.mkstemp``, which would leave it readable by its
owner only. A file that is replaced keeps its permission bits.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_open", "atomic_path", "atomic_write"]

PathLike = str | os.PathLike[str]

_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


def _fsync_dir(directory: str) -> None:
    """Make the rename itself durable; not every platform can open a folder."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def _create_temp(target: str, parents: bool) -> tuple[str, int]:
    """Create an empty temp file next to ``target``: ``(temp path, open write descriptor)``."""
    # Both fail only at the final rename otherwise, after the whole file was written, with an
    # error naming the temp file.
    if not target:
        raise FileNotFoundError(errno.ENOENT, "cannot write to an empty path; give a file name")
    if os.path.isdir(target):
        raise IsADirectoryError(
            errno.EISDIR,
            f"cannot write {target}: it is a directory; give a file path "
            f"such as {os.path.join(target, 'name')}",
            target,
        )
    directory = os.path.dirname(os.path.abspath(target))
    if parents:
        os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(target)}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, _CREATE, 0o666)  # the umask applies, as for any new file
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT,
            f"cannot write {target}: directory {directory} does not exist (create it first)",
            target,
        ) from None
    try:
        # Replacing a file keeps its permissions: a file made private stays private.
        old_mode = stat.S_IMODE(os.stat(target).st_mode) & 0o777
    except OSError:
        return tmp, fd
    try:
        os.chmod(tmp, old_mode)
    except BaseException:
        os.close(fd)
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp, fd


def _discard(tmp: str, target: str, error: BaseException) -> None:
    """Remove the temp file after a failed write; an OS error that names no file (a full disk:
    ``[Errno 28] No space left on device``) gets the target's name, so it says where."""
    with suppress(FileNotFoundError):
        os.unlink(tmp)
    if isinstance(error, OSError) and error.errno is not None and error.filename is None:
        error.filename = target


def _commit(tmp: str, target: str) -> None:
    os.replace(tmp, target)
    _fsync_dir(os.path.dirname(os.path.abspath(target)))


@contextmanager
def atomic_path(path: PathLike, *, parents: bool = False) -> Iterator[Path]:
    """A temp path to write by name; it becomes ``path`` only if the ``with`` block completes.

    The temp file already exists (empty, with the mode ``path`` will have); the writer may
    truncate and fill it, or replace it (its mode is restored). It is fsynced and renamed over
    ``path`` on exit::

        with atomic_path("model.safetensors") as tmp:
            save_file(tensors, str(tmp))

    ``parents`` creates missing folders; without it a missing folder raises
    ``FileNotFoundError`` naming it.
    """
    target = os.fspath(path)
    tmp, fd = _create_temp(target, parents)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    try:
        yield Path(tmp)
        # Some writers recreate the file rather than fill it (safetensors' save_file leaves
        # it 0600 whatever the umask): give it back the intended mode.
        if stat.S_IMODE(os.stat(tmp).st_mode) != mode:
            os.chmod(tmp, mode)
        fd = os.open(tmp, os.O_RDWR | getattr(os, "O_BINARY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _commit(tmp, target)
    except BaseException as e:
        _discard(tmp, target, e)
        raise


@contextmanager
def atomic_open(
    path: PathLike, *, parents: bool = False, buffering: int = -1
) -> Iterator[BinaryIO]:
    """A binary stream whose bytes appear at ``path`` only if the ``with`` block completes::

        with atomic_open("table.bin") as f:
            f.write(header)
            f.write(body)

    ``buffering`` is passed to :func:`open`. ``parents`` as in :func:`atomic_path`.
    """
    target = os.fspath(path)
    tmp, fd = _create_temp(target, parents)
    try:
        with open(fd, "wb", buffering=buffering) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _commit(tmp, target)
    except BaseException as e:
        _discard(tmp, target, e)
        raise


def atomic_write(path: PathLike, data: bytes | str, *, parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically and return ``path`` as a :class:`~pathlib.Path`.

    ``str`` is written as UTF-8 with newlines untouched (no platform translation), so the same
    text gives the same bytes everywhere. ``parents`` as in :func:`atomic_path`.
    """
    if isinstance(data, str):
        data = data.encode("utf-8")
    elif not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(
            f"atomic_write: data must be bytes or str, got {type(data).__name__}; "
            "encode or serialize it first"
        )
    with atomic_open(path, parents=parents) as f:
        f.write(data)
    return Path(path)
