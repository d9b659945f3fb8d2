"""The ``.fdl`` byte format: bytes <-> entries, nothing else (no torch here).

Layout (every integer little-endian), shared with the Rust floDl reader and writer::

    "FDLC"                      4-byte magic
    u32 version                 2 when written; 1..=2 accepted (they differ in naming only)
    32 bytes structural hash    raw SHA-256; all zero = "no hash"
    u32 entry_count
    entry_count x:
        u32 name_len, name      UTF-8
        u32 ndim, ndim x i64    dims
        u8  dtype tag           1=f16 2=bf16 3=f32 4=f64 5=i32 6=i64
        u64 byte_count, bytes   raw little-endian values, C order

:class:`FdlReader` validates as it reads and names the file, the entry and the byte offset of any
fault, so a truncated or foreign file is diagnosed rather than half-read.
"""

from __future__ import annotations

import gzip
import math
import mmap
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import BinaryIO

from .._errors import CheckpointError

MAGIC = b"FDLC"
VERSION = 2
MIN_VERSION = 1
HASH_LEN = 32
ZERO_HASH = bytes(HASH_LEN)
# Caps that only a corrupt or foreign file exceeds; they keep a garbage length from turning into a
# multi-gigabyte allocation before the truncation is noticed.
MAX_NAME_LEN = 1 << 20
MAX_NDIM = 64
_CHUNK = 1 << 24

Buffer = bytes | bytearray | memoryview
DataFilter = bool | Callable[[str], bool]

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class DType(IntEnum):
    """The dtype tags of the format."""

    F16 = 1
    BF16 = 2
    F32 = 3
    F64 = 4
    I32 = 5
    I64 = 6

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def label(self) -> str:
        return self.name.lower()


_ITEMSIZE = {DType.F16: 2, DType.BF16: 2, DType.F32: 4, DType.F64: 8, DType.I32: 4, DType.I64: 8}


@dataclass(frozen=True)
class Header:
    """The fixed part at the start of a file."""

    version: int
    hash: bytes  # 32 raw bytes; ZERO_HASH when the file carries none
    count: int


@dataclass(frozen=True)
class Entry:
    """One named tensor. ``data`` is ``None`` when the reader was asked to skip the bytes."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    nbytes: int
    data: Buffer | None = None


def expected_nbytes(shape: tuple[int, ...], dtype: DType) -> int:
    return math.prod(shape) * dtype.itemsize


def encode_header(hash_bytes: bytes, count: int) -> bytes:
    if len(hash_bytes) != HASH_LEN:
        raise CheckpointError(f"structural hash must be {HASH_LEN} bytes, got {len(hash_bytes)}")
    return MAGIC + _U32.pack(VERSION) + hash_bytes + _U32.pack(count)


def encode_entry_head(name: str, shape: tuple[int, ...], dtype: DType, nbytes: int) -> bytes:
    """Everything of an entry that precedes its raw bytes."""
    raw = name.encode("utf-8")
    return b"".join(
        (
            _U32.pack(len(raw)),
            raw,
            _U32.pack(len(shape)),
            struct.pack(f"<{len(shape)}q", *shape),
            bytes((int(dtype),)),
            _U64.pack(nbytes),
        )
    )


def write_entry(f: BinaryIO, name: str, shape: tuple[int, ...], dtype: DType, data: Buffer) -> int:
    """Stream one entry to ``f``; ``data`` goes out as is, without an intermediate copy.

    Returns the CRC32 of the data bytes (what the metadata's checksum table records).
    """
    nbytes = memoryview(data).nbytes
    if nbytes != expected_nbytes(shape, dtype):
        raise CheckpointError(
            f"entry {name!r}: {nbytes} data bytes do not match shape {list(shape)} "
            f"of {dtype.label} ({expected_nbytes(shape, dtype)} bytes)"
        )
    f.write(encode_entry_head(name, shape, dtype, nbytes))
    f.write(data)
    return zlib.crc32(data)


class FdlReader:
    """Reads and checks a ``.fdl`` stream. ``size`` is the stream length when known (plain files);
    ``f`` may be a copy-on-write ``mmap`` of the file, which makes entry data zero-copy.

    Use :meth:`header` once, then :meth:`entries`.
    """

    def __init__(
        self, f: BinaryIO, source: str, size: int | None = None, what: str = "checkpoint"
    ) -> None:
        self._f = f
        self.source = source
        self.what = what
        self._size = size
        self._pos = 0

    # -- low level ---------------------------------------------------------------------------
    def fail(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.what} {self.source}: {what}")

    def _read(self, n: int) -> bytes:
        try:
            return self._f.read(n)
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise self.fail(f"corrupt gzip stream near byte {self._pos}: {e}") from e

    def _truncated(self, what: str, need: int, got: int) -> CheckpointError:
        return self.fail(
            f"file is truncated: {what} needs {need} bytes at offset {self._pos}, only {got} remain"
        )

    def _remaining(self) -> int | None:
        return None if self._size is None else self._size - self._pos

    def read_exact(self, n: int, what: str) -> bytes:
        """``n`` bytes or a truncation error naming ``what`` was being read."""
        left = self._remaining()
        if left is not None and left < n:
            raise self._truncated(what, n, left)
        if n <= _CHUNK:
            data = self._read(n)
        else:  # never ask for a huge block in one call: a lying length would allocate it
            buf = bytearray()
            while len(buf) < n:
                chunk = self._read(min(_CHUNK, n - len(buf)))
                if not chunk:
                    break
                buf += chunk
            data = bytes(buf)
        if len(data) != n:
            raise self._truncated(what, n, len(data))
        self._pos += n
        return data

    def read_into(self, n: int, what: str) -> Buffer:
        """``n`` bytes as a writable buffer (``torch.frombuffer`` needs one).

        Over a copy-on-write memory map this is a view of the mapping: nothing is copied here,
        and the bytes are paged in only when used.
        """
        left = self._remaining()
        if left is not None and left < n:
            raise self._truncated(what, n, left)
        if isinstance(self._f, mmap.mmap):
            view = memoryview(self._f)[self._pos : self._pos + n]
            self._f.seek(n, os.SEEK_CUR)
            self._pos += n
            return view
        buf = bytearray()
        while len(buf) < n:
            chunk = self._read(min(_CHUNK, n - len(buf)))
            if not chunk:
                raise self._truncated(what, n, len(buf))
            buf += chunk
        self._pos += n
        return buf

    def skip(self, n: int, what: str) -> None:
        left = self._remaining()
        if left is not None:
            if left < n:
                raise self._truncated(what, n, left)
            self._f.seek(n, os.SEEK_CUR)
            self._pos += n
            return
        got = 0
        while got < n:
            chunk = self._read(min(_CHUNK, n - got))
            if not chunk:
                raise self._truncated(what, n, got)
            got += len(chunk)
        self._pos += n

    def read_u32(self, what: str) -> int:
        return _U32.unpack(self.read_exact(4, what))[0]

    def read_u64(self, what: str) -> int:
        return _U64.unpack(self.read_exact(8, what))[0]

    # -- structure ---------------------------------------------------------------------------
    def read_magic(self, magic: bytes, label: str) -> None:
        """Check the leading magic; ``label`` names the expected kind of file in the error."""
        got = self._read(len(magic))
        if got != magic:
            if len(got) < len(magic) and magic.startswith(got):
                raise self._truncated("the magic", len(magic), len(got))
            hint = " (it looks gzip-compressed: name it *.gz)" if got[:2] == b"\x1f\x8b" else ""
            raise self.fail(f"not a {label}: magic {got!r}, expected {magic!r}{hint}")
        self._pos += len(magic)

    def header(self) -> Header:
        self.read_magic(MAGIC, ".fdl checkpoint")
        version = self.read_u32("the version")
        if not MIN_VERSION <= version <= VERSION:
            raise self.fail(
                f"unsupported checkpoint version {version}; this reader supports "
                f"{MIN_VERSION}..={VERSION}"
            )
        hash_bytes = self.read_exact(HASH_LEN, "the structural hash")
        count = self.read_u32("the entry count")
        return Header(version=version, hash=hash_bytes, count=count)

    def entry(self, index: int, *, with_data: DataFilter = True) -> Entry:
        """The next entry; its bytes are read when ``with_data`` is true (or returns true for
        the entry's name), else skipped."""
        at = f"entry {index}"
        name_len = self.read_u32(f"{at}: name length")
        if name_len > MAX_NAME_LEN:
            raise self.fail(f"{at}: name length {name_len} exceeds {MAX_NAME_LEN} (corrupt file)")
        try:
            name = self.read_exact(name_len, f"{at}: name").decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{at}: name is not valid UTF-8 ({e})") from None
        at = f"entry {index} ({name!r})"
        ndim = self.read_u32(f"{at}: ndim")
        if ndim > MAX_NDIM:
            raise self.fail(f"{at}: ndim {ndim} exceeds {MAX_NDIM} (corrupt file)")
        shape = struct.unpack(f"<{ndim}q", self.read_exact(8 * ndim, f"{at}: dims"))
        if any(d < 0 for d in shape):
            raise self.fail(f"{at}: negative dimension in shape {list(shape)}")
        tag = self.read_exact(1, f"{at}: dtype tag")[0]
        try:
            dtype = DType(tag)
        except ValueError:
            known = ", ".join(f"{d.value}={d.label}" for d in DType)
            raise self.fail(f"{at}: unknown dtype tag {tag}; known tags: {known}") from None
        nbytes = self.read_u64(f"{at}: byte count")
        want = expected_nbytes(shape, dtype)
        if nbytes != want:
            raise self.fail(
                f"{at}: byte count {nbytes} does not match shape {list(shape)} of "
                f"{dtype.label} ({want} bytes)"
            )
        data: Buffer | None = None
        if with_data(name) if callable(with_data) else with_data:
            data = self.read_into(nbytes, f"{at}: data")
        else:
            self.skip(nbytes, f"{at}: data")
        return Entry(name=name, shape=shape, dtype=dtype, nbytes=nbytes, data=data)

    def entries(self, header: Header, *, with_data: DataFilter = True) -> Iterator[Entry]:
        """Every entry in file order, then a check that nothing follows the last one."""
        for i in range(header.count):
            yield self.entry(i, with_data=with_data)
        self.expect_end()

    def expect_end(self) -> None:
        """Error unless the stream is exhausted (trailing bytes mean a corrupt or foreign file)."""
        if self._read(1):
            raise self.fail(f"unexpected data after the last entry (offset {self._pos})")
