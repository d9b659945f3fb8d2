"""Where built graphs' generated ``forward`` sources are written, safely.

The files exist only so that tracebacks show the generated statement that failed (see
``_codegen.compile_forward``); the code that runs is compiled from the string, never read back.
They live in ``<tmp>/flodl-graph-<uid>``, a folder in a directory every user can write, so it
is checked before use: it must be a real folder (not a symlink), owned by the current user and
not writable by group or others. Another user could otherwise create it first and plant
symlinks that make a write land on one of your files, or a FIFO that makes a read hang. A folder
that fails the check is not used: a warning names it and why, and a fresh private folder
(``mkdtemp``, removed at exit) serves this process instead.

Files are read with ``O_NOFOLLOW`` (a symlink is never followed, a non-regular file never
read), and written to a new ``O_EXCL | O_NOFOLLOW`` temp file renamed over the target: a symlink
at the target is replaced, never written through.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import shutil
import stat
import tempfile

logger = logging.getLogger("flodl.graph")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_READ = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0)  # a FIFO must not block a read
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_BINARY", 0)
_UNSET = object()
_cached: object = _UNSET  # the folder this process uses: str, None (no folder), or unset


class UnsafeFolder(OSError):
    """A generated-source folder that another user could tamper with."""


def _uid() -> int | None:
    return os.getuid() if hasattr(os, "getuid") else None


def check_private_dir(path: str, uid: int | None = None) -> str:
    """``path`` as a folder only ``uid`` (default: the current user) can write; made ``0o700``
    when missing. Raises :class:`UnsafeFolder` naming why an existing one is refused (a symlink,
    not a folder, another owner, group- or world-writable) and ``OSError`` when it cannot be made.
    """
    uid = _uid() if uid is None else uid
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)  # lstat: a symlink is judged itself, not what it points to
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeFolder(f"{path} is a symlink ({os.readlink(path)!r}), not a folder")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolder(f"{path} exists but is not a folder")
    if uid is not None and st.st_uid != uid:
        raise UnsafeFolder(f"{path} is owned by uid {st.st_uid}, not by you (uid {uid})")
    mode = stat.S_IMODE(st.st_mode)
    if uid is not None and mode & 0o022:
        who = "everyone" if mode & 0o002 else "its group"
        raise UnsafeFolder(f"{path} can be written by {who} (mode {mode:o})")
    return path


def _private_fallback(reason: UnsafeFolder, default: str) -> str | None:
    try:
        folder = tempfile.mkdtemp(prefix="flodl-graph-")  # 0o700, a fresh name
    except OSError:
        return None
    atexit.register(shutil.rmtree, folder, True)
    logger.warning(
        "graph sources: not using %s (%s); generated forward sources go to %s for this process "
        "instead. Remove %s, or make it yours with mode 700 (chmod 700), to use it again",
        default,
        reason.strerror or reason,
        folder,
        default,
    )
    return folder


def source_dir() -> str | None:
    """This process's folder for generated sources (checked once), or None when none can be
    made (the sources then live in ``linecache`` only)."""
    global _cached
    if _cached is _UNSET:
        uid = _uid()
        owner = "user" if uid is None else str(uid)
        default = os.path.join(tempfile.gettempdir(), f"flodl-graph-{owner}")
        try:
            _cached = check_private_dir(default)
        except UnsafeFolder as e:
            _cached = _private_fallback(e, default)
        except OSError:
            _cached = None
    return _cached if isinstance(_cached, str) else None


def _read_regular(path: str) -> str | None:
    """The file's text if it is a regular file (no symlink followed), else None."""
    try:
        fd = os.open(path, _READ)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def write_source(folder: str, name: str, source: str) -> str | None:
    """``source`` in ``folder/name`` (left as is when it already holds it); the path, or None
    when it cannot be written. ``name`` is a plain file name."""
    path = os.path.join(folder, name)
    if _read_regular(path) == source:
        return path
    tmp = os.path.join(folder, f".{name}.{secrets.token_hex(6)}.tmp")
    try:
        fd = os.open(tmp, _CREATE, 0o600)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(source.encode("utf-8"))
        os.replace(tmp, path)  # atomic; replaces a symlink at path, never writes through it
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return None
    return path
