"""migrate_checkpoint: the two-pass matching of the original, output v2 without hash."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError
from flodl_core.checkpoint import (
    MigrateReport,
    checkpoint_hash,
    checkpoint_keys,
    checkpoint_version,
    load_checkpoint,
    migrate_checkpoint,
    read_checkpoint_metadata,
    save_checkpoint,
)


class Old(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.decoder = nn.Linear(8, 4)
        self.norm = nn.LayerNorm(8)


class New(nn.Module):
    """``encoder`` renamed ``enc``, ``decoder`` kept, ``norm`` gone, ``head`` added."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(4, 8)
        self.decoder = nn.Linear(8, 4)
        self.head = nn.Linear(4, 3)


@pytest.mark.parametrize(
    ("src_name", "dst_name"), [("old.fdl", "new.fdl.gz"), ("old.fdl.gz", "new.fdl")]
)
def test_rename_is_remapped_by_shape_and_dtype(
    tmp_path: Path, src_name: str, dst_name: str
) -> None:
    torch.manual_seed(0)
    old = Old()
    src, dst = tmp_path / src_name, tmp_path / dst_name
    save_checkpoint(old, src, hash="11" * 32, metadata={"origin": "v1"})
    report = migrate_checkpoint(src, dst, New())
    assert report.unchanged == ["decoder.weight", "decoder.bias"]
    # enc.weight (8, 4) <- encoder.weight; enc.bias (8,) <- the first unused (8,) f32 entry
    assert report.remapped == [("encoder.weight", "enc.weight"), ("encoder.bias", "enc.bias")]
    assert report.dropped == ["norm.weight", "norm.bias"]
    assert report.missing == ["head.weight", "head.bias"]
    assert not report.is_complete
    assert checkpoint_version(dst) == 2 and checkpoint_hash(dst) is None
    assert read_checkpoint_metadata(dst) == {"origin": "v1"}
    assert [k.name for k in checkpoint_keys(dst)] == [
        "enc.weight",
        "enc.bias",
        "decoder.weight",
        "decoder.bias",
    ]
    new = New()
    load_checkpoint(new, dst, strict=False)
    assert torch.equal(new.enc.weight, old.encoder.weight)
    assert torch.equal(new.decoder.bias, old.decoder.bias)


def test_complete_migration_loads_strictly(tmp_path: Path) -> None:
    class Renamed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.e = nn.Linear(4, 8)
            self.d = nn.Linear(8, 4)
            self.n = nn.LayerNorm(8)

    src, dst = tmp_path / "a.fdl", tmp_path / "b.fdl"
    save_checkpoint(Old(), src)
    report = migrate_checkpoint(src, dst, Renamed())
    assert report.is_complete and report.unchanged == []
    assert len(report.remapped) == 6
    load_checkpoint(Renamed(), dst)


def test_dtype_must_match_for_remapping(tmp_path: Path) -> None:
    src, dst = tmp_path / "a.fdl", tmp_path / "b.fdl"
    save_checkpoint(nn.Linear(2, 2).double(), src)
    report = migrate_checkpoint(src, dst, nn.Sequential(nn.Linear(2, 2)))
    assert report == MigrateReport(dropped=["weight", "bias"], missing=["0.weight", "0.bias"])


def test_src_and_dst_must_differ(tmp_path: Path) -> None:
    src = tmp_path / "a.fdl"
    save_checkpoint(nn.Linear(2, 2), src)
    before = src.read_bytes()
    with pytest.raises(CheckpointError, match="src and dst are the same file"):
        migrate_checkpoint(src, src, nn.Linear(2, 2))
    os.link(src, tmp_path / "hard.fdl")
    with pytest.raises(CheckpointError, match="same file"):
        migrate_checkpoint(src, tmp_path / "hard.fdl", nn.Linear(2, 2))
    assert src.read_bytes() == before


def test_bad_source_writes_nothing(tmp_path: Path) -> None:
    src = tmp_path / "a.fdl"
    src.write_bytes(b"FDLC\x07\x00\x00\x00")
    with pytest.raises(CheckpointError, match="unsupported checkpoint version 7"):
        migrate_checkpoint(src, tmp_path / "b.fdl", nn.Linear(2, 2))
    assert os.listdir(tmp_path) == ["a.fdl"]


def test_migrated_file_carries_checksums(tmp_path: Path) -> None:
    src, dst = tmp_path / "a.fdl", tmp_path / "b.fdl"
    save_checkpoint(nn.Linear(3, 2), src, metadata={"k": "v"})
    migrate_checkpoint(src, dst, nn.Linear(3, 2))
    report = load_checkpoint(nn.Linear(3, 2), dst)
    assert report.verified and report.metadata == {"k": "v"}
