from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError
from flodl_core.checkpoint import (
    CheckpointKey,
    CheckpointNotFoundError,
    checkpoint_hash,
    checkpoint_keys,
    checkpoint_version,
    read_checkpoint_metadata,
    save_checkpoint,
)


@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_keys_version_hash_metadata(
    tmp_path: Path, suffix: str, make_net: Callable[..., nn.Module]
) -> None:
    path = tmp_path / f"n{suffix}"
    save_checkpoint(make_net(), path, hash="0f" * 32, metadata={"a": "1"})
    keys = checkpoint_keys(path)
    assert keys[0] == CheckpointKey("fc.weight", (3, 4), torch.float32)
    assert keys[-1] == CheckpointKey("bn.num_batches_tracked", (), torch.int64)
    assert len(keys) == 9  # the metadata entry is not a key
    assert checkpoint_version(path) == 2
    assert checkpoint_hash(path) == "0f" * 32
    assert read_checkpoint_metadata(path) == {"a": "1"}


def test_no_hash_no_metadata(tmp_path: Path) -> None:
    path = tmp_path / "n.fdl"
    save_checkpoint(nn.Linear(1, 1), path)
    assert checkpoint_hash(path) is None
    assert read_checkpoint_metadata(path) == {}


def test_keys_skip_data_yet_notice_truncation(tmp_path: Path) -> None:
    path = tmp_path / "n.fdl"
    save_checkpoint(nn.Linear(64, 64), path)
    data = path.read_bytes()
    cut = data.index(b"__flodl_meta__") - 4 - 10  # the metadata entry and 10 bytes of bias gone
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match=r"truncated: entry 1 \('bias'\): data"):
        checkpoint_keys(path)
    gz = tmp_path / "n.fdl.gz"
    gz.write_bytes(gzip.compress(data[:cut]))
    with pytest.raises(CheckpointError, match="truncated"):
        checkpoint_keys(gz)


def test_inspecting_a_missing_file(tmp_path: Path) -> None:
    for fn in (checkpoint_keys, checkpoint_version, checkpoint_hash, read_checkpoint_metadata):
        with pytest.raises(CheckpointNotFoundError, match=r"nothing\.fdl"):
            fn(tmp_path / "nothing.fdl")
