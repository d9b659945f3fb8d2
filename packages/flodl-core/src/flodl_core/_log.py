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

from ._checks import check_int
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


def set_verbosity(level: Verbosity | str | int) -> None:
    """Set flodl's log level: a :class:`Verbosity`, its name (case-insensitive), or a
    :mod:`logging` level from ``DEBUG`` to ``CRITICAL`` (``logging.ERROR``: errors only)."""
    if isinstance(level, str):
        try:
            level = Verbosity[level.upper()]
        except KeyError:
            names = format_choices((v.name.lower() for v in Verbosity), sort=False)
            raise ConfigError(f"unknown verbosity {level!r}; expected one of {names}") from None
    # an int outside logging's levels would silence flodl (99) or hand it to the root's (0)
    note = "a Verbosity, its name, or a logging level"
    lo, hi = logging.DEBUG, logging.CRITICAL
    logger.setLevel(check_int(level, "level", ge=lo, le=hi, where="set_verbosity", note=note))


def verbosity() -> Verbosity:
    """The current level, rounded to the nearest named one at or below it."""
    eff = logger.getEffectiveLevel()
    return max((v for v in Verbosity if v <= eff), default=Verbosity.DEBUG)


def _start(env: str | None) -> None:
    """The level ``FLODL_VERBOSITY`` names; a name it does not know is warned about, not raised
    (it would fail every import of flodl, a ``fdl --help`` included)."""
    try:
        set_verbosity(env or "normal")
    except ConfigError as e:
        set_verbosity("normal")
        logger.warning("FLODL_VERBOSITY=%r is ignored: %s", env, e)


_start(os.environ.get("FLODL_VERBOSITY"))
