"""Checkpoint folders of a distributed run (:mod:`flodl_ddp._resume`), written by a world of one:
a trainer state file that changed since it was written is refused before anything is loaded, the
temporary files of a killed write go at the next checkpoint, and a resume folder that is not
there fails a multi-rank run before any rank process starts."""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError
from flodl_ddp import Trainer
from flodl_ddp import _launch as launch
from flodl_ddp._resume import load_checkpoint_into

sys.path.insert(0, str(Path(__file__).parent))
import ddp_trainer_fixtures as fx


def _builder(epochs: int = 1, devices: int = 1) -> Any:
    x, y = fx.make_data(64)
    return (
        Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(epochs)
        .devices(["cpu"] * devices)
        .mode("cpu-cadence")
    )


class _Engine:
    """What a checkpoint loads into (:class:`flodl_ddp._resume.Checkpointed`), recording calls."""

    rank, world = 0, 1

    def __init__(self) -> None:
        torch.manual_seed(7)
        self.model: nn.Module = fx.make_model()
        self.loaded: list[str] = []

    def shared_state(self) -> dict[str, Any]:
        return {}

    def load_shared_state(self, state: dict[str, Any]) -> None:
        self.loaded.append("shared")

    def rank_state(self) -> dict[str, Any]:
        return {}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.loaded.append("rank")


def _flip_last_byte(path: Path) -> None:
    """One bit of the last tensor's last byte: the file still parses, a value changed."""
    blob = bytearray(path.read_bytes())
    blob[-1] ^= 0x01
    path.write_bytes(bytes(blob))


def test_a_flipped_byte_in_the_trainer_state_is_refused_before_anything_loads(
    tmp_path: Path,
) -> None:
    _builder().checkpoint_every(1, str(tmp_path)).run().join(timeout=60)
    (state_file,) = tmp_path.glob("trainer-e*.state")
    engine = _Engine()
    load_checkpoint_into(engine, tmp_path)  # intact: it loads
    assert engine.loaded == ["rank", "shared"]

    _flip_last_byte(state_file)
    engine = _Engine()
    before = {k: v.clone() for k, v in engine.model.state_dict().items()}
    with pytest.raises(CheckpointError, match="SHA-256") as info:
        load_checkpoint_into(engine, tmp_path)
    assert state_file.name in str(info.value)
    assert engine.loaded == []
    for k, v in engine.model.state_dict().items():
        assert torch.equal(v, before[k]), f"{k} was loaded from the checkpoint"

    # a run resumed from it is refused before any rank starts
    with pytest.raises(CheckpointError, match="SHA-256"):
        _builder(epochs=2).resume(str(tmp_path)).run()


def test_another_number_of_ranks_is_refused_and_told_where_the_model_is(tmp_path: Path) -> None:
    """A folder written by one rank, resumed on two: refused before anything loads, naming the
    model file a new run can start from (it loads into a fresh model, as the tutorial says)."""
    from flodl_core import ConfigError, load_checkpoint

    _builder().checkpoint_every(1, str(tmp_path)).run().join(timeout=60)
    engine = _Engine()
    engine.world = 2
    with pytest.raises(ConfigError, match=r"of a run of 1 rank\(s\), this one of 2") as info:
        load_checkpoint_into(engine, tmp_path)
    assert engine.loaded == []
    named = Path(str(info.value).rsplit("start anew from ", 1)[1])
    assert named.parent == tmp_path and named.suffix == ".fdl"
    load_checkpoint(fx.make_model(), named)


def test_a_killed_writes_temporary_files_go_at_the_next_checkpoint(tmp_path: Path) -> None:
    left = [
        ".model-e00000.fdl.0a1b2c3d4e5f.tmp",
        ".trainer-e00000.state.0a1b2c3d4e5f.tmp",
        ".latest.json.0a1b2c3d4e5f.tmp",
    ]
    for name in left:
        (tmp_path / name).write_bytes(b"FDL half written")
    (tmp_path / "notes.txt").write_text("the user's own file")
    _builder(epochs=1).checkpoint_every(1, str(tmp_path)).run().join(timeout=60)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest.json", "model-e00000.fdl", "notes.txt", "trainer-e00000.state"]


def test_a_missing_resume_folder_fails_before_any_rank_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    monkeypatch.setattr(launch, "_launch_spawn", lambda *a, **k: started.append("spawn"))
    before = set(multiprocessing.active_children())
    with pytest.raises(CheckpointError, match="does not exist") as info:
        _builder(devices=2).resume(str(tmp_path / "missing")).run()
    assert str(tmp_path / "missing") in str(info.value)
    assert started == [] and set(multiprocessing.active_children()) == before
