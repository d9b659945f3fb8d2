"""Verbosity-gated logging.

flodl logs through the standard :mod:`logging` tree under ``flodl``; :func:`set_verbosity` is the
one knob users need (``FLODL_VERBOSITY`` sets the start value: quiet, normal, verbose, debug).

An application that never configures :mod:`logging` still sees flodl's records at the verbosity
it set: Python's own last resort prints warnings and errors only, so a fallback on the ``flodl``
logger prints the message to ``sys.stderr`` whenever no other handler would receive the record.
Once a handler exists on the way to the root (``logging.basicConfig``, pytest's capture, one on
``flodl`` itself), records go there alone, never twice.
"""

from __future__ import annotations

import logging
import os
import sys
from enum import IntEnum

from ._errors import ConfigError, format_choices


class Verbosity(IntEnum):
    """How much flodl prints."""

    QUIET = logging.WARNING
    NORMAL = logging.INFO
    VERBOSE = 15
    DEBUG = logging.DEBUG


logger = logging.getLogger("flodl")


class _Fallback(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes a record's message to the current ``sys.stderr`` (read at each write, as Python's
    last resort does) unless another handler on the record's way to the root takes it."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)  # no stream of its own: see ``stream``

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    def handle(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
        node: logging.Logger | None = logging.getLogger(record.name)
        while node is not None:
            if any(h is not self for h in node.handlers):
                return False
            node = node.parent if node.propagate else None
        return bool(super().handle(record))


logger.addHandler(_Fallback())


def set_verbosity(level: Verbosity | str) -> None:
    """Set flodl's log level: a :class:`Verbosity` or its name (case-insensitive)."""
    if isinstance(level, str):
        try:
            level = Verbosity[level.upper()]
        except KeyError:
            names = format_choices((v.name.lower() for v in Verbosity), sort=False)
            raise ConfigError(f"unknown verbosity {level!r}; expected one of {names}") from None
    logger.setLevel(int(level))


def verbosity() -> Verbosity:
    """The current level, rounded to the nearest named one at or below it."""
    eff = logger.getEffectiveLevel()
    return max((v for v in Verbosity if v <= eff), default=Verbosity.DEBUG)


set_verbosity(os.environ.get("FLODL_VERBOSITY", "normal"))
