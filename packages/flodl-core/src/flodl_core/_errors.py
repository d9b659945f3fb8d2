"""The flodl error hierarchy.

Every error names what is wrong (the node, path, file or argument) and what was expected, so a
message read in a log is enough to fix the cause. All flodl errors derive from :class:`FlodlError`,
and each also derives from the built-in exception a Python user would catch for that kind of
failure (``ValueError``, ``KeyError``, ``FileNotFoundError`` ...), so existing ``except`` clauses
keep working.
"""

from __future__ import annotations

from collections.abc import Iterable


class FlodlError(Exception):
    """Base class of every error raised by flodl."""


class ConfigError(FlodlError, ValueError):
    """An argument or configuration value is out of range or of the wrong kind."""


class ShapeError(FlodlError, ValueError):
    """A tensor has a shape other than the one expected."""


class BuildError(FlodlError, ValueError):
    """A graph could not be built. ``errors`` lists every problem found, in call order."""

    def __init__(self, errors: Iterable[str]) -> None:
        self.errors: list[str] = list(errors)
        n = len(self.errors)
        head = f"graph build failed with {n} error{'s' if n != 1 else ''}:"
        super().__init__("\n".join([head, *(f"  - {e}" for e in self.errors)]))


class PathError(FlodlError, KeyError):
    """A dotted graph path (or record path) does not resolve.

    ``valid`` lists the names that do exist at the level where resolution failed.
    """

    def __init__(self, message: str, valid: Iterable[str] = ()) -> None:
        self.valid: list[str] = sorted(valid)
        if self.valid:
            message = f"{message}; valid names here: {', '.join(self.valid)}"
        super().__init__(message)

    def __str__(self) -> str:  # KeyError would repr() the message otherwise
        return str(self.args[0])


class CheckpointError(FlodlError, ValueError):
    """A checkpoint or state file is truncated, foreign, of the wrong version or mismatched."""


class DataError(FlodlError, ValueError):
    """A dataset file or buffer is malformed (bad magic, truncated record, too-short text ...)."""


class FetchError(FlodlError, OSError):
    """Dataset files could not be obtained (offline, bad checksum ...)."""


class VersionMismatchError(FlodlError, ImportError):
    """Installed flodl packages are not of the same release."""


def format_choices(values: Iterable[object], *, sort: bool = True) -> str:
    """The valid choices for an error message: ``a, b, c``, or ``(none)`` when there are none.

    Sorted, so that a set or a dict's keys read the same every time; ``sort=False`` keeps an
    order that means something (levels from quiet to debug, a preference order).
    """
    items = [str(v) for v in values]
    if sort:
        items.sort()
    return ", ".join(items) if items else "(none)"
