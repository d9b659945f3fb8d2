"""Checkpoints of a distributed run, and resuming from one: ``model-eNNNNN.fdl`` (the model),
``trainer-eNNNNN.state`` (the engine's shared and every rank's own state, no pickle) and
``latest.json`` (names both and the state's SHA-256; written last, atomically, so it always
names a complete pair). Rank 0 writes everything; resuming continues as the run would have.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from flodl_core import CheckpointError, ConfigError, atomic_write
from flodl_core.checkpoint import load_checkpoint, read_state_file, save_checkpoint, save_state_file

from ._bypass import _gather
from ._engine_state import EngineState

FORMAT = "flodl-ddp-checkpoint"
VERSION = 2
LATEST = "latest.json"


class DdpTrainerState:
    """A checkpoint's trainer state, as ``save_state_file`` takes it (its class names the kind)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, Any]:
        return self._state


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gather_to_first(blob: bytes, rank: int, world: int) -> list[bytes] | None:
    """Every rank's ``blob`` on rank 0 (``None`` elsewhere) over the default process group: the
    lengths, then one gather of byte tensors padded to the longest (an optimizer state is past
    what a store value may hold)."""
    if world == 1:
        return [blob]
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    sizes = [size for (size,) in _gather([len(blob)], None)]
    mine = torch.zeros(max(sizes), dtype=torch.uint8)
    if blob:
        mine[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    mine = mine.to(device)
    out = [torch.zeros_like(mine) for _ in range(world)] if rank == 0 else None
    dist.gather(mine, out, dst=0)
    if out is None:
        return None
    return [bytes(t[:s].cpu().numpy().tobytes()) for t, s in zip(out, sizes, strict=True)]


def save_checkpoint_from(engine: EngineState, epoch: int, folder: str | os.PathLike[str]) -> None:
    """Write the checkpoint of the epoch that just ended (a collective: every rank calls it)."""
    buf = io.BytesIO()
    torch.save(engine.rank_state(), buf)
    parts = gather_to_first(buf.getvalue(), engine.rank, engine.world)
    if parts is None:
        return
    ranks = [torch.load(io.BytesIO(b), weights_only=True) for b in parts]
    head = {"format": FORMAT, "version": VERSION, "epoch": epoch}
    shared = {**head, "world_size": engine.world, "engine": engine.shared_state(), "ranks": ranks}
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    model_name, state_name = f"model-e{epoch:05d}.fdl", f"trainer-e{epoch:05d}.state"
    save_checkpoint(engine.model, root / model_name, metadata={"epoch": str(epoch)})
    save_state_file(DdpTrainerState(shared), root / state_name)
    sha = _sha256(root / state_name)
    latest = {**head, "model": model_name, "state": state_name, "state_sha256": sha}
    atomic_write(root / LATEST, json.dumps(latest, indent=1))
    for old in root.iterdir():
        name = old.name
        stale = name.startswith(("model-e", "trainer-e")) and name not in (model_name, state_name)
        killed = name.startswith((".model-e", ".trainer-e", f".{LATEST}")) and name.endswith(".tmp")
        if stale or killed:
            old.unlink(missing_ok=True)


def read_latest(path: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    """The checkpoint folder and its ``latest.json``, its trainer state checked against the
    recorded SHA-256 (the launcher calls this before any rank starts); clear errors otherwise."""
    p = Path(path)
    folder = p.parent if p.name == LATEST else p
    index = folder / LATEST
    if not folder.is_dir():
        raise CheckpointError(f"resume path {str(path)!r} does not exist (no such folder)")
    if not index.is_file():
        raise CheckpointError(
            f"resume path {str(path)!r} holds no {LATEST}: not a checkpoint_every(n, path) folder"
        )
    try:
        latest = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{index}: unreadable ({e})") from None
    if latest.get("format") != FORMAT or latest.get("version") != VERSION:
        raise CheckpointError(f"{index} is not a {FORMAT} version {VERSION} index")
    state_file = folder / str(latest.get("state"))
    if not state_file.is_file() or _sha256(state_file) != latest.get("state_sha256"):
        raise CheckpointError(
            f"{state_file} is missing or changed since it was written (its SHA-256 does not "
            f"match {index}); resume from an intact checkpoint"
        )
    return folder, latest


def load_checkpoint_into(engine: EngineState, path: str | os.PathLike[str]) -> None:
    """Restore ``engine`` (model, optimizer, RNG, shared state) from a checkpoint folder; a file
    that changed since it was written fails before anything is loaded."""
    folder, latest = read_latest(path)
    state_file = folder / latest["state"]
    kind, shared = read_state_file(state_file)
    if kind != DdpTrainerState.__qualname__ or shared.get("format") != FORMAT:
        raise CheckpointError(f"{state_file} is not a distributed trainer state")
    if shared["world_size"] != engine.world:
        raise ConfigError(
            f"checkpoint {folder} is of a run of {shared['world_size']} rank(s), this one of "
            f"{engine.world}: resume on as many, or start anew from {folder / latest['model']}"
        )
    load_checkpoint(engine.model, folder / latest["model"])
    engine.load_rank_state(shared["ranks"][engine.rank])
    engine.load_shared_state(shared["engine"])
