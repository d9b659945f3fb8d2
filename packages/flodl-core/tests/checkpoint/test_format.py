"""The byte layer: a golden file written from the spec, header/entry parsing and its errors."""

from __future__ import annotations

import gzip
import io
import json
import struct
import zlib
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError
from flodl_core.checkpoint import (
    checkpoint_hash,
    checkpoint_version,
    load_checkpoint,
    save_checkpoint,
)
from flodl_core.checkpoint._format import (
    DType,
    FdlReader,
    Header,
    encode_entry_head,
    encode_header,
    write_entry,
)

HASH = bytes(range(32))


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor([1.5, -2.0]))
        self.register_buffer("steps", torch.tensor(7, dtype=torch.int64))


W_DATA = struct.pack("<2f", 1.5, -2.0)
STEPS_DATA = struct.pack("<q", 7)


def meta_entry(crcs: dict[str, int]) -> bytes:
    """The reserved metadata entry holding only the checksum table, spelled out by hand."""
    table = "{" + ",".join(f'"{n}":{c}' for n, c in crcs.items()) + "}"
    raw = json.dumps({"flodl.crc32": table}, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 4)
    out = struct.pack("<I", 14) + b"__flodl_meta__"
    out += struct.pack("<I", 1) + struct.pack("<q", len(raw) // 4)
    out += struct.pack("<B", 5)  # i32
    return out + struct.pack("<Q", len(raw)) + raw


def golden_bytes(version: int = 2, checksums: bool = True) -> bytes:
    """Tiny's checkpoint, spelled out from the format description, field by field."""
    out = b"FDLC" + struct.pack("<I", version) + HASH + struct.pack("<I", 3 if checksums else 2)
    out += struct.pack("<I", 1) + b"w"  # name
    out += struct.pack("<I", 1) + struct.pack("<q", 2)  # ndim, dims
    out += struct.pack("<B", 3)  # f32
    out += struct.pack("<Q", 8) + W_DATA
    out += struct.pack("<I", 5) + b"steps"
    out += struct.pack("<I", 0)  # 0-d: no dims
    out += struct.pack("<B", 6)  # i64
    out += struct.pack("<Q", 8) + STEPS_DATA
    if checksums:
        out += meta_entry({"w": zlib.crc32(W_DATA), "steps": zlib.crc32(STEPS_DATA)})
    return out


# Every dtype of the format, with its tag number written out as the spec gives it (not taken from
# the implementation's table), and two values whose bytes pin the element encoding.
GOLDEN_DTYPES = [
    ("f16", 1, "<2e", torch.float16),
    ("bf16", 2, None, torch.bfloat16),
    ("f32", 3, "<2f", torch.float32),
    ("f64", 4, "<2d", torch.float64),
    ("i32", 5, "<2i", torch.int32),
    ("i64", 6, "<2q", torch.int64),
]


def all_dtypes_file() -> bytes:
    """A hand-built file with one entry per dtype, values [1.5, -2] (ints: [3, -4])."""
    out = b"FDLC" + struct.pack("<I", 2) + bytes(32) + struct.pack("<I", len(GOLDEN_DTYPES))
    for name, tag, fmt, _ in GOLDEN_DTYPES:
        if fmt is None:  # bf16: the high half of the f32 bit pattern
            data = b"".join(struct.pack("<f", v)[2:] for v in (1.5, -2.0))
        elif name.startswith("i"):
            data = struct.pack(fmt, 3, -4)
        else:
            data = struct.pack(fmt, 1.5, -2.0)
        out += struct.pack("<I", len(name)) + name.encode()
        out += struct.pack("<I", 1) + struct.pack("<q", 2)
        out += struct.pack("<B", tag) + struct.pack("<Q", len(data)) + data
    return out


class AllDtypes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name, _, _, dtype in GOLDEN_DTYPES:
            self.register_buffer(name, torch.zeros(2, dtype=dtype))


def test_dtype_tags_match_the_format_numbers(tmp_path: Path) -> None:
    """Both directions against the hand-built file: a swapped tag breaks load or save."""
    path = tmp_path / "dtypes.fdl"
    path.write_bytes(all_dtypes_file())
    model = AllDtypes()
    report = load_checkpoint(model, path)
    assert not report.verified and "not verified" in str(report)
    for name, _, _, dtype in GOLDEN_DTYPES:
        got = getattr(model, name)
        want = [3, -4] if name.startswith("i") else [1.5, -2.0]
        assert got.dtype is dtype and got.tolist() == want, name
    out = tmp_path / "saved.fdl"
    save_checkpoint(model, out)
    golden = all_dtypes_file()
    # The saved file is the hand-built one plus the checksum entry (and its count).
    saved = out.read_bytes()
    assert saved[:40] == golden[:40]
    assert struct.unpack("<I", saved[40:44])[0] == len(GOLDEN_DTYPES) + 1
    assert saved[44 : len(golden)] == golden[44:]


def test_saver_writes_the_golden_bytes(tmp_path: Path) -> None:
    path = tmp_path / "tiny.fdl"
    save_checkpoint(Tiny(), path, hash=HASH.hex())
    assert path.read_bytes() == golden_bytes()


def test_gzip_saver_wraps_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "tiny.fdl.gz"
    save_checkpoint(Tiny(), path, hash=HASH.hex())
    assert gzip.decompress(path.read_bytes()) == golden_bytes()


@pytest.mark.parametrize("checksums", [True, False])
@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_loader_reads_the_golden_file(
    tmp_path: Path, version: int, suffix: str, checksums: bool
) -> None:
    data = golden_bytes(version, checksums)
    path = tmp_path / f"golden{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    model = Tiny()
    with torch.no_grad():
        model.w.zero_()
        model.steps.zero_()
    report = load_checkpoint(model, path, expected_hash=HASH.hex())
    assert report.loaded == ["w", "steps"]
    assert report.verified is checksums
    assert ("not verified" in str(report)) is not checksums
    assert model.w.tolist() == [1.5, -2.0]
    assert model.steps.item() == 7 and model.steps.dtype is torch.int64
    assert checkpoint_version(path) == version
    assert checkpoint_hash(path) == HASH.hex()


def test_encode_entry_head_layout() -> None:
    head = encode_entry_head("a/b", (2, 3), DType.BF16, 12)
    assert head == struct.pack("<I", 3) + b"a/b" + struct.pack("<I2qBQ", 2, 2, 3, 2, 12)


def test_encode_header_rejects_short_hash() -> None:
    with pytest.raises(CheckpointError, match="32 bytes"):
        encode_header(b"\x01" * 31, 0)


def test_write_entry_rejects_wrong_byte_count() -> None:
    with pytest.raises(CheckpointError, match=r"7 data bytes do not match shape \[2\] of f32"):
        write_entry(io.BytesIO(), "x", (2,), DType.F32, b"\x00" * 7)


def test_dtype_itemsizes() -> None:
    assert [d.itemsize for d in DType] == [2, 2, 4, 8, 4, 8]
    assert [d.label for d in DType] == ["f16", "bf16", "f32", "f64", "i32", "i64"]


def reader(data: bytes, sized: bool = True) -> FdlReader:
    return FdlReader(io.BytesIO(data), "mem.fdl", len(data) if sized else None)


@pytest.mark.parametrize("sized", [True, False], ids=["plain", "stream"])
def test_reader_parses_entries_and_skips_data(sized: bool) -> None:
    r = reader(golden_bytes(checksums=False), sized)
    header = r.header()
    assert header == Header(version=2, hash=HASH, count=2)
    entries = list(r.entries(header, with_data=lambda name: name == "steps"))
    assert [(e.name, e.shape, e.dtype, e.nbytes) for e in entries] == [
        ("w", (2,), DType.F32, 8),
        ("steps", (), DType.I64, 8),
    ]
    assert entries[0].data is None
    assert bytes(entries[1].data) == struct.pack("<q", 7)


@pytest.mark.parametrize("sized", [True, False], ids=["plain", "stream"])
@pytest.mark.parametrize("cut", [0, 3, 6, 20, 40, 45, 50, 58, 61, 70, 75, 90, 95, -1])
def test_reader_reports_truncation_at_every_field(sized: bool, cut: int) -> None:
    data = golden_bytes()[:cut]
    r = reader(data, sized)
    with pytest.raises(CheckpointError, match="truncated"):
        list(r.entries(r.header()))


def test_reader_rejects_trailing_bytes() -> None:
    r = reader(golden_bytes() + b"\x00")
    with pytest.raises(CheckpointError, match="unexpected data after the last entry"):
        list(r.entries(r.header()))


def test_reader_rejects_huge_lengths_before_allocating() -> None:
    data = b"FDLC" + struct.pack("<I", 2) + HASH + struct.pack("<I", 1) + struct.pack("<I", 2**31)
    r = reader(data, sized=False)
    with pytest.raises(CheckpointError, match="name length 2147483648 exceeds"):
        list(r.entries(r.header()))
    head = b"FDLC" + struct.pack("<I", 2) + HASH + struct.pack("<I", 1)
    data = head + struct.pack("<I", 1) + b"x" + struct.pack("<I", 1000)
    r = reader(data)
    with pytest.raises(CheckpointError, match="ndim 1000 exceeds 64"):
        list(r.entries(r.header()))


def test_reader_rejects_negative_dims_and_bad_names() -> None:
    head = b"FDLC" + struct.pack("<I", 2) + HASH + struct.pack("<I", 1)
    data = head + struct.pack("<I", 1) + b"x" + struct.pack("<Iq", 1, -4)
    r = reader(data)
    with pytest.raises(CheckpointError, match=r"negative dimension in shape \[-4\]"):
        list(r.entries(r.header()))
    data = head + struct.pack("<I", 2) + b"\xff\xfe"
    r = reader(data)
    with pytest.raises(CheckpointError, match="name is not valid UTF-8"):
        list(r.entries(r.header()))


def test_reader_rejects_inconsistent_byte_count() -> None:
    data = bytearray(golden_bytes())
    at = data.index(struct.pack("<Q", 8))  # first entry's byte_count
    data[at : at + 8] = struct.pack("<Q", 12)
    r = reader(bytes(data))
    with pytest.raises(CheckpointError, match=r"byte count 12 does not match shape \[2\] of f32"):
        list(r.entries(r.header()))
