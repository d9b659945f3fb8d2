"""Checkpoints of a real-sized model in a spawned run: 12 M parameters, Adam, 2 CPU ranks, cpu-sync.

Adam's state of such a model (two float32 copies, 96 MB per rank) is far past what one store
value may hold (8 MiB), so the ranks' private states must reach rank 0 another way. Two runs,
one batch per rank and epoch, keep it cheap:

- ``straight``: 2 epochs, a checkpoint after each; the checkpoint of epoch 0 is copied aside
  while the ranks wait at their first batch of epoch 1 (the train step holds them);
- ``resumed``: from that copy, epoch 1 again; it must end bit for bit where ``straight`` did.

Runs once, here rather than in flodl-ddp's own tests (which CI runs twice).
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from flodl_core import load_checkpoint
from flodl_ddp import Trainer

pytestmark = pytest.mark.multiprocess

FIXTURES = Path(__file__).resolve().parent.parent / "packages" / "flodl-ddp" / "tests"
TIMEOUT_S = 180.0


def _fixtures() -> Any:
    if str(FIXTURES) not in sys.path:
        sys.path.insert(0, str(FIXTURES))  # spawned ranks inherit sys.path and import by name
    return importlib.import_module("reliability_fixtures")


def _builder(fx: Any, epochs: int) -> Any:
    x, y, _ = fx.make_data(16)  # batch 8 on each of 2 ranks: one step per epoch
    return (
        Trainer.builder(fx.make_wide_model, fx.make_adam, fx.gated_step)
        .dataset((x, y))
        .batch_size(8)
        .num_epochs(epochs)
        .devices(["cpu", "cpu"])
        .mode("cpu-sync")
        .timeout(120)
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    fx = _fixtures()
    root = tmp_path_factory.mktemp("large")
    ckpt, saved = root / "ckpt", root / "epoch0"
    n_params = sum(p.numel() for p in fx.make_wide_model().parameters())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(fx.GATE_ENV, str(ckpt))  # the spawned ranks inherit it
        t = time.perf_counter()
        handle = _builder(fx, 2).checkpoint_every(1, str(ckpt)).run()
        deadline = time.monotonic() + TIMEOUT_S
        while not (ckpt / "latest.json").exists() and not handle.done:
            assert time.monotonic() < deadline, "no checkpoint after epoch 0"
            time.sleep(0.05)
        if (ckpt / "latest.json").exists():
            shutil.copytree(ckpt, saved)  # the ranks wait at their next batch meanwhile
        Path(str(ckpt) + ".go").touch()
        straight = handle.join(timeout=TIMEOUT_S)
        straight_s = time.perf_counter() - t
    t = time.perf_counter()
    resumed_handle = _builder(fx, 2).resume(str(saved)).run()
    resumed = resumed_handle.join(timeout=TIMEOUT_S)
    return {
        "n_params": n_params,
        "ckpt": ckpt,
        "saved": saved,
        "straight": straight,
        "straight_epochs": [m.epoch for m in handle.history],
        "resumed": resumed,
        "resumed_epochs": [m.epoch for m in resumed_handle.history],
        "seconds": (straight_s, time.perf_counter() - t),
    }


def test_checkpoints_of_a_large_adam_model_are_written(runs: dict[str, Any]) -> None:
    assert runs["n_params"] >= 10_000_000
    assert runs["straight_epochs"] == [0, 1]
    latest = json.loads((runs["ckpt"] / "latest.json").read_text())
    assert latest["epoch"] == 1
    names = sorted(p.name for p in runs["ckpt"].iterdir())
    assert names == ["latest.json", "model-e00001.fdl", "trainer-e00001.state"], names
    # both ranks' Adam states are in the file: 2 ranks x 2 moments x 12 M float32
    size = (runs["ckpt"] / "trainer-e00001.state").stat().st_size
    assert size > 2 * 2 * runs["n_params"] * 4, size
    assert json.loads((runs["saved"] / "latest.json").read_text())["epoch"] == 0


def test_a_resumed_run_ends_bit_identical(runs: dict[str, Any]) -> None:
    straight, resumed = runs["straight"], runs["resumed"]
    assert runs["resumed_epochs"] == [1]
    assert set(straight.params) == set(resumed.params)
    for name, want in straight.params.items():
        assert torch.equal(resumed.params[name], want), name
    # epoch 1 moved the weights away from the checkpoint both runs went through
    at_epoch0 = _fixtures().make_wide_model()
    load_checkpoint(at_epoch0, runs["saved"] / "model-e00000.fdl")
    assert not torch.equal(at_epoch0.state_dict()["2.weight"], straight.params["2.weight"])
