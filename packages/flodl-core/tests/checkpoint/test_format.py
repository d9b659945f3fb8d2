"""The byte layer: a golden file written from the spec, header/entry parsing and its errors."""

from __future__ import annotations

import gzip
import io
import struct
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


def golden_bytes(version: int = 2) -> bytes:
    """Tiny's checkpoint, spelled out from the format description, field by field."""
    out = b"FDLC" + struct.pack("<I", version) + HASH + struct.pack("<I", 2)
    out += struct.pack("<I", 1) + b"w"  # name
    out += struct.pack("<I", 1) + struct.pack("<q", 2)  # ndim, dims
    out += struct.pack("<B", 3)  # f32
    out += struct.pack("<Q", 8) + struct.pack("<2f", 1.5, -2.0)
    out += struct.pack("<I", 5) + b"steps"
    out += struct.pack("<I", 0)  # 0-d: no dims
    out += struct.pack("<B", 6)  # i64
    out += struct.pack("<Q", 8) + struct.pack("<q", 7)
    return out


def test_saver_writes_the_golden_bytes(tmp_path: Path) -> None:
    path = tmp_path / "tiny.fdl"
    save_checkpoint(Tiny(), path, hash=HASH.hex())
    assert path.read_bytes() == golden_bytes()


def test_gzip_saver_wraps_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "tiny.fdl.gz"
    save_checkpoint(Tiny(), path, hash=HASH.hex())
    assert gzip.decompress(path.read_bytes()) == golden_bytes()


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_loader_reads_the_golden_file(tmp_path: Path, version: int, suffix: str) -> None:
    data = golden_bytes(version)
    path = tmp_path / f"golden{suffix}"
    path.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    model = Tiny()
    with torch.no_grad():
        model.w.zero_()
        model.steps.zero_()
    report = load_checkpoint(model, path, expected_hash=HASH.hex())
    assert report.loaded == ["w", "steps"]
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
    r = reader(golden_bytes(), sized)
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
