from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError, ConfigError
from flodl_core.checkpoint import load_checkpoint, read_checkpoint_metadata, save_checkpoint
from flodl_core.checkpoint._format import DType
from flodl_core.checkpoint._read import read_checkpoint, read_header

from .test_format import STEPS_DATA, W_DATA, Tiny, golden_bytes, meta_entry


@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_entries_and_metadata_are_set_apart(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"m{suffix}"
    model = nn.Linear(3, 2)
    save_checkpoint(model, path, hash="12" * 32, metadata={"k": "v"})
    full = read_checkpoint(path)
    assert full.header.version == 2 and full.header.hash == bytes.fromhex("12" * 32)
    assert full.header.count == 3  # two tensors + the metadata entry
    assert [(e.name, e.shape, e.dtype) for e in full.entries] == [
        ("weight", (2, 3), DType.F32),
        ("bias", (2,), DType.F32),
    ]
    assert full.metadata == {"k": "v"}
    weight = torch.frombuffer(full.entries[0].data, dtype=torch.float32).reshape(2, 3)
    assert torch.equal(weight, model.weight.detach())

    light = read_checkpoint(path, with_data=False)
    assert all(e.data is None for e in light.entries)
    assert light.metadata == {"k": "v"}  # read even when tensor data is skipped


def test_plain_files_are_mapped_copy_on_write(tmp_path: Path) -> None:
    path = tmp_path / "m.fdl"
    save_checkpoint(nn.Linear(3, 2), path)
    before = path.read_bytes()
    data = read_checkpoint(path).entries[1].data
    assert isinstance(data, memoryview) and not data.readonly
    data[:4] = b"\x00\x00\x80\x7f"  # a write lands in private pages, never in the file
    assert path.read_bytes() == before


def test_header_only(tmp_path: Path) -> None:
    path = tmp_path / "m.fdl.gz"
    save_checkpoint(nn.Linear(3, 2), path)
    data = gzip.decompress(path.read_bytes())
    path.write_bytes(gzip.compress(data[:44]))  # entries gone: the header alone still reads
    assert read_header(path).count == 3  # weight, bias, the metadata entry


def _flip(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_a_flipped_data_byte_is_caught(tmp_path: Path, suffix: str) -> None:
    model = nn.Linear(3, 2)
    plain = tmp_path / "ok.fdl"
    save_checkpoint(model, plain)
    data = plain.read_bytes()
    # The first byte of the weight's data: header 44 + name len 4 + "weight" 6 + ndim 4 + 2 dims
    # 16 + tag 1 + byte count 8.
    bad = _flip(data, 44 + 4 + 6 + 4 + 16 + 1 + 8)
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(gzip.compress(bad) if suffix.endswith(".gz") else bad)
    before = model.weight.detach().clone()
    with pytest.raises(CheckpointError, match=r"entry 'weight' is corrupt: CRC32 .* backup"):
        load_checkpoint(model, path)
    assert torch.equal(model.weight.detach(), before)  # nothing applied


def test_checksums_are_checked_and_hidden(tmp_path: Path) -> None:
    path = tmp_path / "m.fdl"
    save_checkpoint(nn.Linear(3, 2), path, metadata={"k": "v"})
    assert read_checkpoint(path).verified
    assert not read_checkpoint(path, with_data=False).verified  # data skipped: nothing checked
    assert read_checkpoint_metadata(path) == {"k": "v"}  # the table stays internal
    report = load_checkpoint(nn.Linear(3, 2), path)
    assert report.verified and report.metadata == {"k": "v"}
    assert str(report) == "loaded 2 tensor(s), skipped 0, missing 0; integrity: verified (CRC32)"


def test_metadata_cannot_use_the_checksum_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"'flodl\.crc32' is reserved"):
        save_checkpoint(nn.Linear(3, 2), tmp_path / "m.fdl", metadata={"flodl.crc32": "{}"})


def test_a_checksum_table_that_does_not_list_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "m.fdl"
    save_checkpoint(nn.Linear(3, 2), path)
    # Renaming an entry in place ("weight" -> "weighT") leaves the table naming the old name.
    data = path.read_bytes().replace(b"weight", b"weighT", 1)
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match=r"no checksum for \['weighT'\]"):
        read_checkpoint(path)


def _tiny_file(table: dict[str, int]) -> bytes:
    """test_format's golden Tiny file (entries "w", "steps") with ``table`` as its checksums."""
    golden = golden_bytes(checksums=False)
    count_at = 4 + 4 + 32
    head = golden[:count_at] + struct.pack("<I", 3) + golden[count_at + 4 :]
    return head + meta_entry(table)


@pytest.mark.parametrize(
    ("table", "match"),
    [
        # an entry the table misses: it would be read unchecked
        ({"w": zlib.crc32(W_DATA)}, r"\(no checksum for \['steps'\]\);"),
        # a name in the table that the file lacks: an entry was lost
        (
            {"w": zlib.crc32(W_DATA), "steps": zlib.crc32(STEPS_DATA), "bias": 0},
            r"\(a checksum for entries the file lacks \['bias'\]\);",
        ),
        # both at once
        (
            {"w": zlib.crc32(W_DATA), "bias": 0},
            r"no checksum for \['steps'\]; a checksum for entries the file lacks \['bias'\]",
        ),
    ],
)
def test_a_table_that_misses_or_names_an_absent_entry_is_refused(
    tmp_path: Path, table: dict[str, int], match: str
) -> None:
    path = tmp_path / "tiny.fdl"
    path.write_bytes(_tiny_file(table))
    with pytest.raises(CheckpointError, match=match):
        read_checkpoint(path)
    model = Tiny()
    with torch.no_grad():
        model.w.zero_()
    with pytest.raises(CheckpointError, match="the checksum table does not list"):
        load_checkpoint(model, path)
    assert model.w.tolist() == [0.0, 0.0] and int(model.steps) == 7  # nothing applied
    # the same file with the full table loads
    path.write_bytes(_tiny_file({"w": zlib.crc32(W_DATA), "steps": zlib.crc32(STEPS_DATA)}))
    assert load_checkpoint(model, path).verified and model.w.tolist() == [1.5, -2.0]
