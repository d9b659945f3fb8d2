"""Output settings shared by every command: verbosity and colour.

Verbosity is an integer: -1 quiet, 0 normal, 1 verbose, 2+ debug. It is exported to child
processes as ``FLODL_VERBOSITY`` (the names ``flodl_core`` logging understands).
"""

from __future__ import annotations

import os
import sys

_VERBOSITY_NAMES = {-1: "quiet", 0: "normal", 1: "verbose", 2: "debug"}

verbosity = 0
ansi = False


def configure(level: int, use_ansi: bool | None) -> None:
    """Set verbosity and colour for this process, and export the verbosity to children."""
    global verbosity, ansi
    verbosity = level
    if use_ansi is None:
        use_ansi = sys.stdout.isatty() and "NO_COLOR" not in os.environ
    ansi = use_ansi
    os.environ["FLODL_VERBOSITY"] = _VERBOSITY_NAMES[max(-1, min(level, 2))]


def _paint(code: str, text: str) -> str:
    return f"\033[{code}m{text}\033[0m" if ansi else text


def green(text: str) -> str:
    return _paint("32", text)


def yellow(text: str) -> str:
    return _paint("33", text)


def red(text: str) -> str:
    return _paint("31", text)


def bold(text: str) -> str:
    return _paint("1", text)


def info(text: str) -> None:
    """A progress line on stderr (silent with ``-q``)."""
    if verbosity >= 0:
        print(text, file=sys.stderr, flush=True)


def debug(text: str) -> None:
    """A line shown with ``-v`` and more."""
    if verbosity >= 1:
        print(text, file=sys.stderr, flush=True)
