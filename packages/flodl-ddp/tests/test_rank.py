"""The rank engine (:mod:`flodl_ddp._rank`) in a world of one, built as the in-process launch
builds it: the elastic snapshot a failed window rolls back to restores the optimizer, the model
and the shared state exactly, whatever training did to them in place after the snapshot."""

from __future__ import annotations

import copy
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from flodl_ddp import Trainer
from flodl_ddp._comm import SoloComm
from flodl_ddp._membership import StaticWorld
from flodl_ddp._options import check_config
from flodl_ddp._rank import RankContext, RankEngine
from flodl_ddp._reduce import LocalReducer
from flodl_ddp._resume import save_checkpoint_from

sys.path.insert(0, str(Path(__file__).parent))
import ddp_trainer_fixtures as fx


def _engine(
    grad_scaler: bool = False, resume: str | None = None, micro: int = 1, optim: Any = fx.make_adam
) -> RankEngine:
    x, y = fx.make_data(128)
    cfg = (
        Trainer.builder(fx.make_model, optim, fx.mse_step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(2)
        .devices(["cpu"])
        .mode("cpu-cadence")
        .grad_scaler(grad_scaler)
        .micro_batches(micro)
        .build_config()
    )
    spec = check_config(replace(cfg, resume=resume))
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
    return RankEngine(spec, ctx, fx.make_model(), optim)


def _train_epoch(engine: RankEngine, epoch: int, blow_up: int | None = None) -> None:
    """One epoch of MSE steps; batch ``blow_up`` (its index) has an infinite loss."""
    try:
        for i, batch in enumerate(engine.epoch(epoch)):
            loss = nn.functional.mse_loss(engine.forward_model(batch[0]), batch[1])
            engine.step(loss * float("inf") if i == blow_up else loss)
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


def _params(engine: RankEngine) -> list[torch.Tensor]:
    return [p.detach().clone() for p in engine.model.parameters()]


def test_loss_scaling_trains_float32_exactly_as_without_it() -> None:
    """Scaling by a power of two and back is exact in float32: the same weights, bit for bit,
    and the scaler really ran (its growth tracker counted every finite step)."""
    plain, scaled = _engine(), _engine(grad_scaler=True)
    rng = torch.get_rng_state()
    _train_epoch(plain, 0)
    torch.set_rng_state(rng)
    _train_epoch(scaled, 0)
    for a, b in zip(_params(plain), _params(scaled), strict=True):
        assert torch.equal(a, b)
    assert scaled.scaler.get_scale() == 65536.0
    assert scaled.scaler.state_dict()["_growth_tracker"] == scaled.batches_per_epoch
    assert plain.scaler.state_dict() == {}  # off: a pass-through


def test_a_step_with_infinite_gradients_is_skipped_and_the_scale_halved() -> None:
    """What float16 overflow does under loss scaling: the step is skipped, not applied."""
    scaled, plain = _engine(grad_scaler=True), _engine()
    _train_epoch(scaled, 0, blow_up=3)
    _train_epoch(plain, 0, blow_up=3)
    assert all(torch.isfinite(p).all() for p in _params(scaled))
    assert scaled.scaler.get_scale() == 32768.0
    assert not all(torch.isfinite(p).all() for p in _params(plain))  # without: NaN weights


def test_the_loss_scale_survives_a_checkpoint(tmp_path: Path) -> None:
    engine = _engine(grad_scaler=True)
    _train_epoch(engine, 0, blow_up=0)
    state = engine.scaler.state_dict()
    assert state["scale"] == 32768.0 and state["_growth_tracker"] > 0
    save_checkpoint_from(engine, 0, tmp_path)
    assert _engine(grad_scaler=True, resume=str(tmp_path)).scaler.state_dict() == state
    # a run without scaling resumes without it, and a scaled one from a plain checkpoint anew
    assert _engine(resume=str(tmp_path)).scaler.state_dict() == {}
    save_checkpoint_from(_engine(), 1, tmp_path)
    assert _engine(grad_scaler=True, resume=str(tmp_path)).scaler.get_scale() == 65536.0


@pytest.mark.parametrize("optim", [fx.make_sgd, fx.make_adam])
def test_micro_batches_train_as_their_whole_batch_would(optim: Any) -> None:
    """Four parts of 4 samples, their gradients weighted by their share and added up, make one
    optimizer step on the batch of 16's mean gradient: the same weights as whole batches, to
    float32 rounding, with one optimizer step per batch and four step(loss) calls (SGD: a
    gradient of the wrong scale would show; Adam: a step per part would)."""
    whole, parts = _engine(optim=optim), _engine(micro=4, optim=optim)
    rng = torch.get_rng_state()
    _train_epoch(whole, 0)
    torch.set_rng_state(rng)
    calls = []
    try:
        for batch in parts.epoch(0):
            calls.append(len(batch[0]))
            parts.step(nn.functional.mse_loss(parts.forward_model(batch[0]), batch[1]))
    finally:
        parts.sink.uninstall()
    assert calls == [4] * 4 * parts.batches_per_epoch
    if optim is fx.make_adam:
        steps = {int(s["step"]) for s in parts.optimizer.state.values()}
        assert steps == {parts.batches_per_epoch}
    for a, b in zip(_params(whole), _params(parts), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert parts.metrics[-1].avg_loss == pytest.approx(whole.metrics[-1].avg_loss, rel=1e-5)
