"""The rank engine (:mod:`flodl_ddp._rank`) in a world of one, built as the in-process launch
builds it: the elastic snapshot a failed window rolls back to restores the optimizer, the model
and the shared state exactly, whatever training did to them in place after the snapshot."""

from __future__ import annotations

import copy
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from flodl_ddp import Trainer
from flodl_ddp._comm import SoloComm
from flodl_ddp._membership import StaticWorld
from flodl_ddp._options import check_config
from flodl_ddp._rank import RankContext, RankEngine
from flodl_ddp._reduce import LocalReducer

sys.path.insert(0, str(Path(__file__).parent))
import ddp_trainer_fixtures as fx


def _engine() -> RankEngine:
    x, y = fx.make_data(128)
    cfg = (
        Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(2)
        .devices(["cpu"])
        .mode("cpu-cadence")
        .build_config()
    )
    spec = check_config(cfg)
    device = torch.device("cpu")
    ctx = RankContext(
        0,
        1,
        device,
        socket.gethostname(),
        SoloComm(),
        time.time(),
        lambda _a: LocalReducer(),
        StaticWorld(1),
    )
    torch.manual_seed(spec.seed)
    return RankEngine(spec, ctx, fx.make_model(), fx.make_adam)


def _train_epoch(engine: RankEngine, epoch: int) -> None:
    try:
        for batch in engine.epoch(epoch):
            loss = nn.functional.mse_loss(engine.forward_model(batch[0]), batch[1])
            engine.step(loss)
    finally:
        engine.sink.uninstall()


def _same(a: Any, b: Any, where: str = "state") -> None:
    """``a`` and ``b`` hold equal values (tensors bit for bit), recursively."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b or (a != a and b != b), f"{where}: {a!r} != {b!r}"  # NaN equals NaN


def test_the_snapshot_restores_what_training_changed_in_place() -> None:
    engine = _engine()
    _train_epoch(engine, 0)  # Adam has state now: step, exp_avg, exp_avg_sq per parameter
    assert len(engine.optimizer.state) == 4
    want = copy.deepcopy(engine.state_dict())

    snap = engine.snapshot()
    # what a window's training does to the live objects, in place, after the snapshot
    with torch.no_grad():
        for p in engine.model.parameters():
            p.add_(1.0)
    for s in engine.optimizer.state.values():
        s["exp_avg"].add_(1.0)
        s["exp_avg_sq"].mul_(3.0)
        s["step"].add_(5.0)
    engine.optimizer.param_groups[0]["lr"] = 123.0
    engine.tally.ranks[0]["batches"] = 999
    engine.global_step += 17
    engine.next_epoch += 1

    engine.load_state_dict(snap)
    _same(engine.state_dict(), want)
    assert engine.optimizer.param_groups[0]["lr"] == want["optimizer"]["param_groups"][0]["lr"]


def test_training_goes_on_identically_after_a_restore() -> None:
    """A restored engine trains the next epoch exactly as one that was never disturbed."""
    plain, rolled = _engine(), _engine()
    for e in (plain, rolled):
        _train_epoch(e, 0)
    snap = rolled.snapshot()
    for s in rolled.optimizer.state.values():
        s["exp_avg"].add_(1.0)
    rolled.load_state_dict(snap)
    rng = torch.get_rng_state()  # one process: both engines draw from the same RNG
    _train_epoch(plain, 1)
    torch.set_rng_state(rng)
    _train_epoch(rolled, 1)
    for (name, a), b in zip(plain.model.state_dict().items(), rolled.model.state_dict().values(),
                            strict=True):  # fmt: skip
        assert torch.equal(a, b), name
