"""Argument checks that build the error message for you.

Every flodl function that takes a count, a size, an index or a rate checks it the same way, and
its error reads the same way: where, which argument, what was expected, what came::

    DataLoader: batch_size must be an int > 0, got 0
    focal_loss: gamma must be a finite number >= 0, got nan
    port must be an int in 0..65535 (0 picks a free one), got 70000
    save_checkpoint: path must be a str or os.PathLike, got NoneType None
"""

from __future__ import annotations

import math
import operator
import os

from ._errors import ConfigError

__all__ = ["check_finite", "check_int", "check_path"]

Bound = int | float | None


def _expected(integer: bool, ge: Bound, gt: Bound, le: Bound, lt: Bound) -> str:
    """`` >= 1``, `` in 0..9`` (ints), `` in [-1, 1]`` (numbers) ... (empty when unbounded)."""
    if ge is not None and le is not None:
        return f" in {ge}..{le}" if integer else f" in [{ge:g}, {le:g}]"
    parts = [
        f"{op} {b:g}" if isinstance(b, float) else f"{op} {b}"
        for op, b in ((">=", ge), (">", gt), ("<=", le), ("<", lt))
        if b is not None
    ]
    return (" " + " and ".join(parts)) if parts else ""


def _fail(
    integer: bool,
    value: object,
    name: str,
    where: str | None,
    note: str | None,
    expected: str | None,
    bounds: tuple[Bound, Bound, Bound, Bound],
) -> ConfigError:
    head = f"{where}: " if where else ""
    if expected is None:
        expected = ("an int" if integer else "a finite number") + _expected(integer, *bounds)
    tail = f" ({note})" if note else ""
    return ConfigError(f"{head}{name} must be {expected}{tail}, got {value!r}")


def _in_bounds(v: float, ge: Bound, gt: Bound, le: Bound, lt: Bound) -> bool:
    return not (
        (ge is not None and v < ge)
        or (gt is not None and v <= gt)
        or (le is not None and v > le)
        or (lt is not None and v >= lt)
    )


def check_int(
    value: object,
    name: str,
    *,
    ge: int | None = None,
    gt: int | None = None,
    le: int | None = None,
    lt: int | None = None,
    where: str | None = None,
    note: str | None = None,
    expected: str | None = None,
) -> int:
    """``value`` as an ``int`` if it is an integer within the bounds, else a :class:`ConfigError`.

    Integers of any kind pass (``int``, NumPy integers, 0-d integer tensors: whatever
    ``operator.index`` takes); ``bool`` does not, nor do floats, even whole ones. The message
    names ``where`` (the function or class, optional), ``name``, the bounds, ``note`` (a hint
    such as ``"0 disables"``) and the value received; ``expected`` replaces the generated
    ``an int > 0`` part where a domain has its own words (``"a positive integer"``)::

        check_int(n, "batch_size", gt=0, where="DataLoader")
        # DataLoader: batch_size must be an int > 0, got 2.5
    """
    bounds = (ge, gt, le, lt)
    if isinstance(value, bool):
        raise _fail(True, value, name, where, note, expected, bounds)
    try:
        n = operator.index(value)  # type: ignore[call-overload]
    except TypeError:
        raise _fail(True, value, name, where, note, expected, bounds) from None
    if not _in_bounds(n, *bounds):
        raise _fail(True, value, name, where, note, expected, bounds)
    return n


def check_finite(
    value: object,
    name: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    where: str | None = None,
    note: str | None = None,
    expected: str | None = None,
) -> float:
    """``value`` as a ``float`` if it is a finite number within the bounds, else a ConfigError.

    Ints, floats, NumPy scalars and 0-d tensors pass; ``bool``, strings, NaN and infinities do
    not. The message is built as in :func:`check_int`::

        check_finite(gamma, "gamma", ge=0, where="focal_loss")
        # focal_loss: gamma must be a finite number >= 0, got nan
    """
    bounds = (ge, gt, le, lt)
    if isinstance(value, (bool, str, bytes)):
        raise _fail(False, value, name, where, note, expected, bounds)
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: a tensor of several elements
        raise _fail(False, value, name, where, note, expected, bounds) from None
    if not (math.isfinite(v) and _in_bounds(v, *bounds)):
        raise _fail(False, value, name, where, note, expected, bounds)
    return v


def check_path(
    value: object,
    name: str,
    *,
    where: str | None = None,
    note: str | None = None,
    expected: str = "a str or os.PathLike",
) -> str:
    """``value`` as a ``str`` (:func:`os.fspath`) if it is a ``str`` or an ``os.PathLike``
    (``pathlib.Path``), else a :class:`ConfigError` built as in :func:`check_int` that names
    the type received, since a path of the wrong kind is usually ``None`` or a swapped
    argument::

        check_path(path, "path", where="save_checkpoint")
        # save_checkpoint: path must be a str or os.PathLike, got NoneType None
    """
    if isinstance(value, str | os.PathLike):
        return os.fspath(value)  # type: ignore[no-any-return]
    head, tail = (f"{where}: " if where else ""), (f" ({note})" if note else "")
    got = f"{type(value).__name__} {value!r:.60}"
    raise ConfigError(f"{head}{name} must be {expected}{tail}, got {got}")
