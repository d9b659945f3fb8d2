"""Atomic writes and gzip-by-suffix reads."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import pytest

from flodl_core import CheckpointError
from flodl_core.checkpoint import CheckpointNotFoundError, _io
from flodl_core.checkpoint._io import atomic_write, open_read


def test_atomic_write_replaces_target(tmp_path: Path) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"old")
    with atomic_write(path) as f:
        f.write(b"new")
        assert path.read_bytes() == b"old"  # nothing visible until the block completes
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["a.bin"]


def test_atomic_write_gzip_is_deterministic(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gz", tmp_path / "b.gz"
    for p in (a, b):
        with atomic_write(p) as f:
            f.write(b"payload" * 100)
    assert gzip.decompress(a.read_bytes()) == b"payload" * 100
    assert a.read_bytes() == b.read_bytes()  # no temp name or mtime inside the header


@pytest.mark.parametrize("fail_at", ["write", "fsync", "replace"])
def test_failed_write_leaves_target_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_at: str
) -> None:
    path = tmp_path / "a.bin"
    path.write_bytes(b"old")

    def boom(*args: object) -> None:
        raise OSError(f"injected {fail_at} failure")

    if fail_at == "fsync":
        monkeypatch.setattr(_io.os, "fsync", boom)
    if fail_at == "replace":
        monkeypatch.setattr(_io.os, "replace", boom)
    with pytest.raises(OSError, match="injected"), atomic_write(path) as f:
        f.write(b"half")
        if fail_at == "write":
            boom()
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["a.bin"]


def test_atomic_write_names_missing_directory(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "a.bin"
    with pytest.raises(FileNotFoundError, match="does not exist") as info, atomic_write(path):
        pass
    assert info.value.filename == str(path)


def test_open_read_missing_file_is_file_not_found(tmp_path: Path) -> None:
    path = tmp_path / "missing.fdl"
    with pytest.raises(CheckpointNotFoundError) as info, open_read(path):
        pass
    err = info.value
    assert isinstance(err, FileNotFoundError) and isinstance(err, CheckpointError)
    assert err.filename == str(path)
    assert "checkpoint not found" in str(err) and str(path) in str(err)


def test_open_read_gz_path_with_plain_data(tmp_path: Path) -> None:
    path = tmp_path / "model.fdl.gz"
    path.write_bytes(b"FDLC\x02\x00\x00\x00")
    with (
        pytest.raises(CheckpointError, match=r"ends with \.gz but the file is not gzip data"),
        open_read(path),
    ):
        pass


def test_open_read_sizes(tmp_path: Path) -> None:
    plain, packed = tmp_path / "a.fdl", tmp_path / "a.fdl.gz"
    plain.write_bytes(b"12345")
    packed.write_bytes(gzip.compress(b"12345"))
    with open_read(plain) as (f, size):
        assert size == 5 and f.read() == b"12345"
    with open_read(packed) as (f, size):
        assert size is None and f.read() == b"12345"
