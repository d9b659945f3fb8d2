"""What a run says about itself: a solo run has no mode, no peer and no averaging; the DiLoCo
cell trains cpu-async with DiLoCo as the outer optimizer (no training here: headers, rows and
the trainer's configuration)."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ddp_bench._cells import DILOCO, outer_optimizer, parse_cell, trainer_mode
from ddp_bench._config import BenchConfig
from ddp_bench._runner import _header, _row, _start, _trainer, epoch_line, run_devices
from flodl_ddp import DiLoCo
from flodl_monitor import Monitor

HW = {"host": "bench", "cpu": "Test CPU", "torch": "2.13.0"}
BUNDLE = SimpleNamespace(synthetic=False, source="mnist: test", vocab=None)


def metrics(**extra: Any) -> SimpleNamespace:
    """An epoch's metrics as a one-rank trainer reports them: syncs and an anchor all the same."""
    base = dict(epoch=0, avg_loss=0.5, eval=90.0, epoch_ms=100.0, syncs=6, avg_sync_ms=0.0,
                per_rank_batch_share=[1.0], per_rank_throughput=[1000.0], per_rank=[],
                anchor=10, lr=1e-3)  # fmt: skip
    return SimpleNamespace(**{**base, **extra})


def test_solo_header_names_no_mode_and_no_rank() -> None:
    cfg = BenchConfig(slowdown={1: 2.0})
    devices, slow = run_devices(cfg, "solo-1")
    assert devices == ["cpu"] and slow == {0: 2.0}
    lines = _header(cfg, "mlp/solo-1", BUNDLE, devices, slow, HW, 2, 64)  # type: ignore[arg-type]
    assert lines[1].startswith(
        "# device: cpu alone (slowed 2x, as rank 1 of the multi-rank runs), no averaging | host"
    )
    assert "rank 0" not in "\n".join(lines) and "mode" not in lines[1]
    alone = _header(cfg, "mlp/solo-0", BUNDLE, ["cpu"], {}, HW, 2, 64)  # type: ignore[arg-type]
    assert alone[1].startswith("# device: cpu alone, no averaging |")


def test_multi_rank_header_names_mode_and_outer_optimizer() -> None:
    cfg = BenchConfig(slowdown={1: 2.0}, bind_cores=False)
    line = _header(cfg, f"mlp/{DILOCO}", BUNDLE, ["cpu", "cpu"], {1: 2.0}, HW, 2, 64)[1]  # type: ignore[arg-type]
    assert line.startswith("# devices: cpu, cpu (rank 1 slowed 2x) | mode cpu-async, outer "
                           "optimizer DiLoCo(lr=0.7, momentum=0.9) | host bench")  # fmt: skip
    plain = _header(cfg, "mlp/cpu-async", BUNDLE, ["cpu", "cpu"], {}, HW, 2, 64)[1]  # type: ignore[arg-type]
    assert "| mode cpu-async |" in plain and "outer" not in plain


def test_solo_rows_carry_no_averaging() -> None:
    solo = _row(metrics(), "accuracy", solo=True)
    assert (solo.syncs, solo.avg_sync_ms, solo.anchor, solo.batch_share) == (None, None, None, None)
    assert epoch_line(solo, False) == "epoch 1: loss=0.500000, eval=90.0000 (0.1s)"
    pair = _row(metrics(syncs=3, avg_sync_ms=1.5, per_rank_batch_share=[0.6, 0.4]), "accuracy")
    assert (pair.syncs, pair.anchor, pair.batch_share) == (3, 10, [0.6, 0.4])
    assert epoch_line(pair, False).endswith("(0.1s, 3 syncs, anchor 10)")


def test_diloco_cell_trains_cpu_async_with_diloco() -> None:
    assert parse_cell("CPU_Async_DiLoCo") == DILOCO and trainer_mode(DILOCO) == "cpu-async"
    assert isinstance(outer_optimizer(DILOCO), DiLoCo) and outer_optimizer("cpu-async") is None
    assert outer_optimizer(DILOCO) is not outer_optimizer(DILOCO)  # a fresh one per run
    import torch

    from flodl_core.data import TensorDataSet

    bundle = SimpleNamespace(
        train=TensorDataSet(torch.zeros(8, 1, 28, 28), torch.zeros(8, dtype=torch.long)),
        vocab=None,
    )
    cfg = BenchConfig(bind_cores=False, data_dir=Path("data"))
    mon = Monitor(1, stream=io.StringIO())
    try:
        b = _trainer(cfg, "mlp", DILOCO, bundle, ["cpu", "cpu"], {}, 1, 4, mon)  # type: ignore[arg-type]
        tc = b.build_config()
        assert str(tc.mode) == "cpu-async" and isinstance(tc.outer_optimizer, DiLoCo)
        plain = _trainer(cfg, "mlp", "cpu-async", bundle, ["cpu", "cpu"], {}, 1, 4, mon)  # type: ignore[arg-type]
        assert plain.build_config().outer_optimizer is None
    finally:
        mon.close()


def test_solo_start_silences_only_the_engine_summary() -> None:
    log = logging.getLogger("flodl")
    before = log.level
    seen: list[bool] = []

    class Builder:
        def run(self) -> str:
            seen.append(log.isEnabledFor(logging.INFO))  # the summary line is printed if so
            return "handle"

    log.setLevel(logging.INFO)
    try:
        assert _start(Builder(), solo=True) == "handle" and log.level == logging.INFO
        assert _start(Builder(), solo=False) == "handle"
        assert seen == [False, True]
    finally:
        log.setLevel(before)
