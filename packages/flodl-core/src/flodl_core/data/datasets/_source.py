"""What a parser accepts for one file: its bytes, or a path (``str`` / ``Path``) to read."""

from __future__ import annotations

import os
from typing import Union

from ..._errors import DataError

Source = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]
"""A file's content, or where to read it (``.gz`` or raw: the parser tells them apart)."""


def read_source(source: object, what: str) -> bytes:
    """The bytes of ``source``: returned as they are, or read from the path it names."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            raise DataError(
                f"{what}: no file at {path!r} (relative to {os.getcwd()}); pass the path of the "
                "downloaded file (.gz or unpacked) or its bytes"
            ) from None
        except OSError as e:
            raise DataError(f"{what}: cannot read {path!r}: {e}") from e
    raise DataError(
        f"{what}: expected the file's bytes or a path (str or pathlib.Path), "
        f"got {type(source).__name__}"
    )
