"""The JSONL record log: the record tree mirrored on disk, one file per node.

A record at ``root/host-a/rank1`` is one line of ``<dir>/root/host-a/rank1.jsonl``; alerts go to
the file of the node they concern. Each line is written by one ``write`` on a file opened with
``O_APPEND``, so lines from several threads never interleave and a killed process leaves whole
lines only. A line can still be torn: a short write on a full disk (taken back out at once), or
a power loss mid-write. A torn last line is dropped when the file is opened again to append (a
record written after it would merge with it) and skipped, with a warning, when the log is
loaded; a malformed line anywhere else is an error.
Each node is capped: past ``cap_bytes / 2`` the file rotates to ``<name>.jsonl.1`` (replacing the
older one), so a node never holds more than ``cap_bytes`` on disk.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from flodl_core import ConfigError, DataError

from ._alerts import Alert
from ._paths import split_path
from ._records import Record, RecordTree

DEFAULT_CAP = 32 << 20
_MAX_OPEN = 64
logger = logging.getLogger("flodl.monitor")


class RecordLog:
    """Appends every record and alert of a :class:`RecordTree` under ``directory``.

    ``cap_bytes=0`` means the default 32 MiB per node; the smallest cap is 4 KiB.
    """

    def __init__(self, directory: str | os.PathLike[str], cap_bytes: int = 0) -> None:
        if not isinstance(cap_bytes, int) or (cap_bytes != 0 and cap_bytes < 4096):
            raise ConfigError(f"cap_bytes must be 0 (default 32 MiB) or >= 4096, got {cap_bytes!r}")
        self.directory = Path(directory)
        self.cap_bytes = cap_bytes or DEFAULT_CAP
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._open: OrderedDict[Path, tuple[int, int]] = OrderedDict()  # file -> (fd, size)
        self._warned = False

    def file_for(self, path: str) -> Path:
        """``<dir>/root/host-a/rank1.jsonl`` for ``root/host-a/rank1``."""
        *parents, name = split_path(path)
        return self.directory.joinpath(*parents, name + ".jsonl")

    def __call__(self, kind: str, item: Any) -> None:
        """Tree listener: append a record or an alert."""
        if isinstance(item, Record):
            line = {"type": "record", **item.to_json()}
        elif isinstance(item, Alert):
            line = {"type": "alert", **item.to_json()}
        else:
            return
        self.append(item.path, line)

    def append(self, path: str, obj: dict[str, Any]) -> None:
        data = (json.dumps(obj, separators=(",", ":"), allow_nan=False) + "\n").encode()
        target = self.file_for(path)
        with self._lock:
            try:
                self._write(target, data)
            except OSError as e:  # a full disk must not stop training; say so once
                if not self._warned:
                    self._warned = True
                    logger.warning("record log: cannot write %s (%s); dropping records", target, e)

    def _write(self, target: Path, data: bytes) -> None:
        fd, size = self._fd(target)
        if size and size + len(data) > self.cap_bytes // 2:
            os.close(fd)
            del self._open[target]
            os.replace(target, target.with_name(target.name + ".1"))
            fd, size = self._fd(target)
        written = os.write(fd, data)  # one write on an O_APPEND fd: the line lands whole
        if written != len(data):  # short (a full disk): take the torn line back out
            os.ftruncate(fd, size)
            raise OSError(errno.ENOSPC, f"wrote {written} of a {len(data)}-byte line")
        self._open[target] = (fd, size + written)

    def _fd(self, target: Path) -> tuple[int, int]:
        entry = self._open.get(target)
        if entry is not None:
            self._open.move_to_end(target)
            return entry
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        entry = (fd, _drop_torn_tail(fd, target))
        self._open[target] = entry
        if len(self._open) > _MAX_OPEN:  # bounded fds on trees with hundreds of ranks
            _, (old_fd, _) = self._open.popitem(last=False)
            os.close(old_fd)
        return entry

    def close(self) -> None:
        with self._lock:
            for fd, _ in self._open.values():
                os.close(fd)
            self._open.clear()


def _drop_torn_tail(fd: int, name: Path, window: int = 1 << 16) -> int:
    """Cut a last line that lacks its newline (a write torn by a power loss) off the file
    ``name`` open at ``fd``; its size after. A line longer than ``window`` is ended instead."""
    size = os.fstat(fd).st_size
    tail = os.pread(fd, min(size, window), size - min(size, window))
    if not tail or tail.endswith(b"\n"):
        return size
    cut = tail.rfind(b"\n") + 1
    if cut == 0 and len(tail) < size:  # no line end within the window: keep the data
        return size + os.write(fd, b"\n")
    keep = size - len(tail) + cut
    os.ftruncate(fd, keep)
    logger.warning("record log: dropped a torn last line (%d bytes) of %s", size - keep, name)
    return keep


def load_record_log(directory: str | os.PathLike[str], **tree_kwargs: Any) -> RecordTree:
    """Rebuild a :class:`RecordTree` from a record log (rotated files first, then current).

    Raises :class:`~flodl_core.DataError` naming the file and line of anything malformed.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DataError(f"record log {str(root)!r} is not a directory")
    tree = RecordTree(**tree_kwargs)
    files = sorted(root.rglob("*.jsonl"))
    if not files:
        raise DataError(f"record log {str(root)!r} holds no .jsonl files")
    for current in files:
        rel = current.relative_to(root).with_suffix("").as_posix()
        try:
            split_path(rel)
        except ConfigError as e:
            raise DataError(f"{current}: not a record log file ({e})") from None
        for f in (current.with_name(current.name + ".1"), current):
            if f.exists():
                _replay(tree, f, rel)
    return tree


def _replay(tree: RecordTree, f: Path, path: str) -> None:
    # Read as bytes and decode per line: a binary or foreign file then fails on its line with
    # the file named, not with a bare UnicodeDecodeError from the iterator.
    with open(f, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.endswith(b"\n") and not _parses(raw):  # torn by a crash mid-write
                logger.warning("%s:%d: skipped a torn last line (%d bytes)", f, lineno, len(raw))
                return
            try:
                obj = json.loads(raw.decode("utf-8"))
                if obj["type"] == "record":
                    if not isinstance(obj["metrics"], dict):
                        raise TypeError(f"metrics is {obj['metrics']!r}, not an object")
                    tree.publish(path, obj["metrics"], step=obj["step"], t=obj["t"])
                elif obj["type"] == "alert":
                    tree.alert(_alert_of(obj, path))
            except (ValueError, KeyError, TypeError) as e:  # UnicodeDecodeError is a ValueError
                raise DataError(f"{f}:{lineno}: malformed record line ({e})") from None


def _parses(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return True


def _alert_of(obj: dict[str, Any], path: str) -> Alert:
    """An alert line back as an :class:`Alert` (TypeError on fields of the wrong kind)."""
    kind, message, step, t = obj["kind"], obj["message"], obj["step"], obj["t"]
    if not (isinstance(kind, str) and isinstance(message, str)):
        raise TypeError(f"alert kind and message must be strings, got {kind!r}, {message!r}")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise TypeError(f"alert step must be an int or null, got {step!r}")
    return Alert(kind, path, message, step, float(t))
