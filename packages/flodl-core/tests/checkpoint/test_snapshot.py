from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError
from flodl_core.checkpoint import (
    ModelSnapshot,
    checkpoint_hash,
    load_checkpoint,
    read_checkpoint_metadata,
    save_checkpoint,
)


def test_snapshot_is_a_frozen_copy(tmp_path: Path, make_net: Callable[..., nn.Module]) -> None:
    net = make_net()
    save_checkpoint(net, tmp_path / "direct.fdl")
    snap = ModelSnapshot.capture(net)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(1.0)  # training goes on after the capture
    snap.save(tmp_path / "snap.fdl")
    assert (tmp_path / "snap.fdl").read_bytes() == (tmp_path / "direct.fdl").read_bytes()
    assert checkpoint_hash(tmp_path / "snap.fdl") is None


def test_snapshot_mapping_and_copy_semantics(make_net: Callable[..., nn.Module]) -> None:
    net = make_net()
    snap = ModelSnapshot.capture(net)
    assert list(snap) == [name for name in snap]  # a read-only Mapping
    assert len(snap) == 9 and "bn.num_batches_tracked" in snap
    assert snap["fc.weight"].data_ptr() != net.fc.weight.data_ptr()
    assert not snap["fc.weight"].requires_grad
    assert snap.nbytes == sum(t.numel() * t.element_size() for t in net.state_dict().values())
    assert repr(snap) == f"ModelSnapshot(9 tensors, {snap.nbytes} bytes)"


def test_snapshot_save_with_hash_and_metadata(
    tmp_path: Path, make_net: Callable[..., nn.Module]
) -> None:
    snap = ModelSnapshot.capture(make_net())
    path = tmp_path / "s.fdl.gz"
    snap.save(path, hash="cd" * 32, metadata={"epoch": "3"})
    assert checkpoint_hash(path) == "cd" * 32
    assert read_checkpoint_metadata(path) == {"epoch": "3"}
    load_checkpoint(make_net(seed=5), path, expected_hash="cd" * 32)


def test_unstorable_dtype_is_refused_at_capture() -> None:
    model = nn.Linear(2, 2)
    model.register_buffer("phase", torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(CheckpointError, match=r"'phase' has dtype torch\.complex64"):
        ModelSnapshot.capture(model)
