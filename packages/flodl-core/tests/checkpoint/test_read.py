from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core.checkpoint import save_checkpoint
from flodl_core.checkpoint._format import DType
from flodl_core.checkpoint._read import read_checkpoint, read_header


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
    assert read_header(path).count == 2
