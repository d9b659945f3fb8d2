"""Reading a whole ``.fdl`` file into entries, with the metadata entry set apart."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .._errors import CheckpointError
from ._format import Entry, FdlReader, Header
from ._io import PathLike, open_read
from ._meta import META_NAME, crc32, decode_metadata, split_checksums


@dataclass
class CheckpointFile:
    """A parsed file: header, entries in file order (metadata entry removed), metadata.

    ``verified`` is true when every entry's bytes matched the CRC32 the file records; false for a
    file written without checksums, or when the data were not read.
    """

    path: str
    header: Header
    entries: list[Entry] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    verified: bool = False


def _verify(ckpt: CheckpointFile, crcs: dict[str, int]) -> None:
    """Every entry's data against the recorded CRC32; the first mismatch is an error."""
    names = {e.name for e in ckpt.entries}
    unlisted = [e.name for e in ckpt.entries if e.name not in crcs]
    extra = [n for n in crcs if n not in names]
    # Either alone is corruption: an entry with no checksum would be read unchecked, and a
    # checksum for a missing entry means an entry was lost.
    if unlisted or extra:
        parts = [f"no checksum for {unlisted[:5]}"] if unlisted else []
        parts += [f"a checksum for entries the file lacks {extra[:5]}"] if extra else []
        raise CheckpointError(
            f"checkpoint {ckpt.path}: the checksum table does not list the file's entries "
            f"({'; '.join(parts)}); the file is corrupt: restore it from a backup or save it again"
        )
    for e in ckpt.entries:
        assert e.data is not None
        got = crc32(e.data)
        if got != crcs[e.name]:
            raise CheckpointError(
                f"checkpoint {ckpt.path}: entry {e.name!r} is corrupt: CRC32 of its "
                f"{e.nbytes} bytes is {got:08x}, the file recorded {crcs[e.name]:08x}; restore "
                "the file from a backup or save it again"
            )
    ckpt.verified = True


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
        out.metadata, crcs = split_checksums(out.metadata, path)
        if crcs is not None and with_data:
            _verify(out, crcs)
        return out
