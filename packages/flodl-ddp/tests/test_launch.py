"""What :func:`flodl_ddp._launch.start` refuses before any rank process starts."""

from __future__ import annotations

import multiprocessing
import sys
from pathlib import Path
from typing import Any

import pytest

from flodl_core import ConfigError
from flodl_ddp import Trainer
from flodl_ddp import _launch as launch

sys.path.insert(0, str(Path(__file__).parent))
import ddp_trainer_fixtures as fx


@pytest.fixture
def no_spawn(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records a spawned launch instead of starting processes."""
    started: list[str] = []
    monkeypatch.setattr(launch, "_launch_spawn", lambda *a, **k: started.append("spawn"))
    return started


@pytest.mark.parametrize("devices", [["cpu:3", "cpu:9"], ["cpu", "cpu:1"]])
def test_indexed_cpu_devices_are_refused_with_the_fix(
    devices: list[str], no_spawn: list[str]
) -> None:
    x, y = fx.make_data(64)
    builder: Any = (
        Trainer.builder(fx.make_model, fx.make_sgd, fx.mse_step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(1)
        .devices(devices)
        .mode("cpu-cadence")
    )
    before = set(multiprocessing.active_children())
    with pytest.raises(ConfigError) as info:
        builder.run()
    text = str(info.value)
    assert str(devices) in text and "a CPU has no index in torch" in text
    assert "list 'cpu' once per CPU rank" in text and "threads_per_rank" in text
    assert no_spawn == [] and set(multiprocessing.active_children()) == before
