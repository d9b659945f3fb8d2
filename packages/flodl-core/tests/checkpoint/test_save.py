"""save_checkpoint / write_checkpoint: refusals happen before the file is touched."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError, ConfigError
from flodl_core.checkpoint import (
    _save,
    checkpoint_keys,
    load_checkpoint,
    save_checkpoint,
    write_checkpoint,
)


def test_save_is_deterministic_and_gzip_smaller_on_redundant_data(tmp_path: Path) -> None:
    model = nn.Linear(64, 64)
    with torch.no_grad():
        model.weight.fill_(0.5)
    save_checkpoint(model, tmp_path / "a.fdl")
    save_checkpoint(model, tmp_path / "b.fdl")
    save_checkpoint(model, tmp_path / "c.fdl.gz")
    assert (tmp_path / "a.fdl").read_bytes() == (tmp_path / "b.fdl").read_bytes()
    assert (tmp_path / "c.fdl.gz").stat().st_size < (tmp_path / "a.fdl").stat().st_size // 10


def test_failure_mid_write_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_net: Callable[..., nn.Module]
) -> None:
    path = tmp_path / "model.fdl"
    save_checkpoint(make_net(seed=0), path)
    before = path.read_bytes()
    calls = []
    real = _save.write_entry

    def flaky(*args: object) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full (injected)")
        real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_save, "write_entry", flaky)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(make_net(seed=1), path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.fdl"]


def test_refusals_write_nothing(tmp_path: Path) -> None:
    path = tmp_path / "x.fdl"
    cases: list[tuple[Callable[[], None], type[Exception], str]] = [
        (
            lambda: write_checkpoint(path, [("a", torch.zeros(1)), ("a", torch.ones(1))]),
            CheckpointError,
            "duplicate tensor name 'a'",
        ),
        (
            lambda: write_checkpoint(path, [("__flodl_meta__", torch.zeros(1))]),
            CheckpointError,
            "reserved",
        ),
        (
            lambda: write_checkpoint(path, [("a", [1.0])]),  # type: ignore[list-item]
            CheckpointError,
            "'a' is a list, not a tensor",
        ),
        (
            lambda: write_checkpoint(path, [("c", torch.zeros(1, dtype=torch.complex64))]),
            CheckpointError,
            "'c' has dtype torch.complex64",
        ),
        (
            lambda: save_checkpoint(nn.Linear(1, 1, device="meta"), path),
            CheckpointError,
            "'weight' is on the meta device",
        ),
        (
            lambda: write_checkpoint(path, torch.zeros(2)),  # type: ignore[arg-type]
            ConfigError,
            r"tensors\[0\] must be a \(name: str, tensor\) pair, got Tensor",
        ),
        (
            lambda: write_checkpoint(path, 5),  # type: ignore[arg-type]
            ConfigError,
            r"tensors must be \(name, tensor\) pairs or a mapping of names to tensors, got int",
        ),
        (
            lambda: write_checkpoint(path, [(0, torch.zeros(1))]),  # type: ignore[list-item]
            ConfigError,
            r"tensors\[0\] must be a \(name: str, tensor\) pair",
        ),
        (
            lambda: write_checkpoint(path, [torch.zeros(1)]),  # type: ignore[list-item]
            ConfigError,
            r"tensors\[0\] must be a \(name: str, tensor\) pair, got Tensor",
        ),
        (lambda: save_checkpoint(nn.Linear(1, 1), path, hash="xyz"), ConfigError, "64 hex"),
        (
            lambda: save_checkpoint(nn.Linear(1, 1), path, metadata={"a": 1}),  # type: ignore[dict-item]
            ConfigError,
            "str to str",
        ),
    ]
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()
    assert os.listdir(tmp_path) == []


def test_empty_metadata_adds_no_entry(tmp_path: Path) -> None:
    save_checkpoint(nn.Linear(2, 2), tmp_path / "a.fdl", metadata={})
    save_checkpoint(nn.Linear(2, 2), tmp_path / "b.fdl")
    assert (tmp_path / "a.fdl").stat().st_size == (tmp_path / "b.fdl").stat().st_size


def test_write_checkpoint_keeps_the_given_order(tmp_path: Path) -> None:
    path = tmp_path / "t.fdl"
    write_checkpoint(path, [("z", torch.zeros(2)), ("a", torch.ones(3, dtype=torch.int64))])
    keys = checkpoint_keys(path)
    assert [(k.name, k.shape, k.dtype) for k in keys] == [
        ("z", (2,), torch.float32),
        ("a", (3,), torch.int64),
    ]


def test_a_state_dict_items_or_a_generator_of_pairs_are_written_in_order(tmp_path: Path) -> None:
    sd = nn.Linear(3, 2).state_dict()
    for i, given in enumerate([sd, sd.items(), ((k, v) for k, v in sd.items())]):
        write_checkpoint(tmp_path / f"{i}.fdl", given)  # type: ignore[arg-type]
        assert [k.name for k in checkpoint_keys(tmp_path / f"{i}.fdl")] == ["weight", "bias"]
    loaded = nn.Linear(3, 2)
    load_checkpoint(loaded, tmp_path / "0.fdl")
    assert torch.equal(loaded.weight, sd["weight"])


def test_bool_buffers_round_trip_through_widening(tmp_path: Path) -> None:
    class Masked(nn.Module):
        def __init__(self, value: bool) -> None:
            super().__init__()
            self.register_buffer("mask", torch.tensor([value, not value, value]))

    save_checkpoint(Masked(True), tmp_path / "m.fdl")
    target = Masked(False)
    load_checkpoint(target, tmp_path / "m.fdl")
    assert target.mask.dtype is torch.bool and target.mask.tolist() == [True, False, True]
