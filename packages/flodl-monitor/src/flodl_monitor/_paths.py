"""Record paths: ``root``, ``root/host-a``, ``root/host-a/rank1``.

A record path is also a file path (the JSONL record log mirrors the tree on disk) and a URL query
value, so segments are restricted to a safe alphabet: no ``..``, no separators, no hidden files.
"""

from __future__ import annotations

import re

from flodl_core import ConfigError

ROOT = "root"
MAX_DEPTH = 8
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def split_path(path: str) -> tuple[str, ...]:
    """Validate a record path and return its segments.

    Raises :class:`~flodl_core.ConfigError` naming the bad segment and the expected form.
    """
    if not isinstance(path, str):
        raise ConfigError(f"record path must be a str, got {type(path).__name__}")
    segments = tuple(path.split("/"))
    if segments[0] != ROOT:
        raise ConfigError(f"record path {path!r} must start with 'root' (e.g. 'root/host-a/rank1')")
    if len(segments) > MAX_DEPTH:
        depth = len(segments)
        raise ConfigError(f"record path {path!r} is {depth} levels deep; at most {MAX_DEPTH}")
    for seg in segments[1:]:
        if not _SEGMENT.fullmatch(seg) or seg.endswith(".jsonl"):
            raise ConfigError(
                f"record path {path!r}: bad segment {seg!r}; segments are 1-64 letters, digits, "
                "'_', '-' or '.', start with a letter or digit, and do not end in '.jsonl'"
            )
    return segments


def is_within(path: str, ancestor: str) -> bool:
    """Whether ``path`` is ``ancestor`` or lies below it."""
    return path == ancestor or path.startswith(ancestor + "/")
