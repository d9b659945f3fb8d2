"""Verbosity-gated logging.

flodl logs through the standard :mod:`logging` tree under ``flodl``; :func:`set_verbosity` is the
one knob users need (``FLODL_VERBOSITY`` sets the start value: quiet, normal, verbose, debug).
"""

from __future__ import annotations

import logging
import os
from enum import IntEnum

from ._errors import ConfigError, format_choices


class Verbosity(IntEnum):
    """How much flodl prints."""

    QUIET = logging.WARNING
    NORMAL = logging.INFO
    VERBOSE = 15
    DEBUG = logging.DEBUG


logger = logging.getLogger("flodl")


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
