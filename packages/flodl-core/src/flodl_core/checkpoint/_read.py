"""Reading a whole ``.fdl`` file into entries, with the metadata entry set apart."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .._errors import CheckpointError
from ._format import Entry, FdlReader, Header
from ._io import PathLike, open_read
from ._meta import META_NAME, decode_metadata


@dataclass
class CheckpointFile:
    """A parsed file: header, entries in file order (metadata entry removed), metadata."""

    path: str
    header: Header
    entries: list[Entry] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)


def read_header(path: PathLike) -> Header:
    """Only the fixed header: no entry is read."""
    path = os.fspath(path)
    with open_read(path) as (f, size):
        return FdlReader(f, path, size).header()


def read_checkpoint(path: PathLike, *, with_data: bool = True) -> CheckpointFile:
    """Parse and check the whole file (entry data skipped unless ``with_data``).

    Nothing of the caller's state is touched here, so callers can validate everything they
    read before applying any of it. Entry data of a plain file are views of a copy-on-write
    memory map: read lazily, never written back.
    """
    path = os.fspath(path)
    with open_read(path, mapped=True) as (f, size):
        reader = FdlReader(f, path, size)
        header = reader.header()
        out = CheckpointFile(path=path, header=header)
        seen: set[str] = set()
        # The metadata entry is read in full even when tensor data is skipped.
        want = True if with_data else (lambda name: name == META_NAME)
        for entry in reader.entries(header, with_data=want):
            if entry.name in seen:
                raise CheckpointError(f"checkpoint {path}: duplicate entry name {entry.name!r}")
            seen.add(entry.name)
            if entry.name == META_NAME:
                out.metadata = decode_metadata(entry, path)
            else:
                out.entries.append(entry)
        return out
