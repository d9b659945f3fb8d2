"""Checkpoints of a distributed run, and resuming from one.

A checkpoint folder holds, for the last epoch written:

- ``model-eNNNNN.fdl``: the model (:func:`flodl_core.save_checkpoint`);
- ``trainer-eNNNNN.state``: a flodl state file (no pickle) with every rank's optimizer state,
  RNG state and scheduler position, and the shared state: ElChe, guard, meta-controller, outer
  optimizer and global weights, async overshoot, epoch and global step;
- ``latest.json``: names the two files above. It is written last, atomically, so it always
  points at a complete pair; older pairs are removed after it.

Rank 0 writes everything (the other ranks send their private state through the store), so the
folder only has to be reachable from rank 0's host. Checkpoints are taken at epoch ends; a
resumed run starts at the next epoch with the data order, RNG and optimizer state it would have
had, so a resumed run on CPU continues bit for bit like the run that was never stopped.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from flodl_core import CheckpointError, ConfigError, atomic_write
from flodl_core.checkpoint import load_checkpoint, read_state_file, save_checkpoint, save_state_file

if TYPE_CHECKING:
    from ._rank import RankEngine

FORMAT = "flodl-ddp-checkpoint"
VERSION = 1
LATEST = "latest.json"


class DdpTrainerState:
    """The shared part of a checkpoint as a ``state_dict()`` holder for ``save_state_file``."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._state = state


def _write_text_atomic(path: Path, text: str) -> None:
    atomic_write(path, text)


def rank_state_bytes(engine: RankEngine) -> bytes:
    """This rank's private state (optimizer, RNG, scheduler), serialised for rank 0."""
    state: dict[str, Any] = {
        "optimizer": engine.optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "sched_step": engine._sched_step,
    }
    if engine.device.type == "cuda":
        state["cuda_rng"] = torch.cuda.get_rng_state(engine.device)
    if engine.scheduler is not None and callable(getattr(engine.scheduler, "state_dict", None)):
        state["scheduler"] = engine.scheduler.state_dict()
    if engine.averager.alpha is not None:  # EASGD: replicas differ, keep each one
        state["params"] = [p.detach().to("cpu", copy=True) for p in engine.model.parameters()]
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def save_checkpoint_from(engine: RankEngine, epoch: int) -> None:
    """Write the checkpoint of the epoch that just ended (a collective: every rank calls it)."""
    parts = engine.comm.gather_bytes("ck", rank_state_bytes(engine))
    if engine.rank != 0:
        return
    assert parts is not None
    ranks = [torch.load(io.BytesIO(b), weights_only=True) for b in parts]
    shared: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "epoch": epoch,
        "next_epoch": epoch + 1,
        "global_step": engine.global_step,
        "window": engine.window,
        "world_size": engine.world,
        "mode": engine.mode.name,
        "elche": engine.elche.state_dict(),
        "guard": engine.guard.state_dict(),
        "meta": engine.meta.state_dict() if engine.meta is not None else None,
        "averager": engine.averager.state_dict(),
        "overshoot": engine.overshoot.state_dict(),
        "ranks": ranks,
    }
    folder = Path(engine.cfg.checkpoint_path)  # type: ignore[arg-type]
    folder.mkdir(parents=True, exist_ok=True)
    model_name = f"model-e{epoch:05d}.fdl"
    state_name = f"trainer-e{epoch:05d}.state"
    save_checkpoint(engine.model, folder / model_name, metadata={"epoch": str(epoch)})
    save_state_file(DdpTrainerState(shared), folder / state_name)
    latest = {"format": FORMAT, "version": VERSION, "epoch": epoch}
    latest.update(model=model_name, state=state_name)
    _write_text_atomic(folder / LATEST, json.dumps(latest, indent=1))
    for old in folder.iterdir():
        if old.name.startswith(("model-e", "trainer-e")) and old.name not in (
            model_name,
            state_name,
        ):
            old.unlink(missing_ok=True)


def read_latest(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The checkpoint folder and its ``latest.json``; clear errors for anything else."""
    p = Path(path)
    folder = p.parent if p.name == LATEST else p
    index = folder / LATEST
    if not index.is_file():
        raise CheckpointError(
            f"resume path {str(path)!r} holds no {LATEST}; expected a folder written by "
            "checkpoint_every(n, path)"
        )
    try:
        latest = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{index}: unreadable ({e})") from None
    if latest.get("format") != FORMAT or latest.get("version") != VERSION:
        raise CheckpointError(f"{index} is not a {FORMAT} version {VERSION} index")
    return folder, latest


def load_checkpoint_into(engine: RankEngine, path: str | os.PathLike[str]) -> None:
    """Restore ``engine`` (model, optimizer, RNG, shared state) from a checkpoint folder."""
    folder, latest = read_latest(path)
    kind, shared = read_state_file(folder / latest["state"])
    if kind != DdpTrainerState.__qualname__ or shared.get("format") != FORMAT:
        raise CheckpointError(f"{folder / latest['state']} is not a distributed trainer state")
    if shared["world_size"] != engine.world:
        raise ConfigError(
            f"checkpoint {folder} was written by {shared['world_size']} ranks; this run has "
            f"{engine.world}. Resume with the same number of devices"
        )
    load_checkpoint(engine.model, folder / latest["model"])
    mine = shared["ranks"][engine.rank]
    engine.optimizer.load_state_dict(mine["optimizer"])
    if "params" in mine:
        with torch.no_grad():
            for p, t in zip(engine.model.parameters(), mine["params"], strict=True):
                p.copy_(t)
    engine._sched_step = int(mine.get("sched_step", 0))
    if engine.scheduler is not None and "scheduler" in mine:
        engine.scheduler.load_state_dict(mine["scheduler"])
    engine.elche.load_state_dict(shared["elche"])
    engine.guard.load_state_dict(shared["guard"])
    if engine.meta is not None and shared.get("meta") is not None:
        engine.meta.load_state_dict(shared["meta"])
    engine.averager.load_state_dict(shared["averager"])
    engine.overshoot.load_state_dict(shared["overshoot"])
    engine.start_epoch = int(shared["next_epoch"])
    engine.global_step = int(shared["global_step"])
    engine.window = int(shared["window"])
    torch.set_rng_state(mine["rng"])
    if "cuda_rng" in mine and engine.device.type == "cuda":
        torch.cuda.set_rng_state(mine["cuda_rng"], engine.device)
