"""Fixtures: synthetic run records for the report and baseline tests; a small MNIST-shaped
dataset for the end-to-end runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ddp_bench import EpochRow, RankTime, RunRecord
from ddp_bench.data._mnist import idx_images, idx_labels

SPEEDS = {"solo-0": [1000.0], "solo-1": [500.0]}
"""Samples/s of compute each rank measures per epoch: alone, and in every two-rank run
``[900, 450]``."""
HW = {"host": "bench", "cpu": "Test CPU", "cores": 2, "torch": "2.13.0", "gpus": []}


def record(
    model: str,
    mode: str,
    total: float,
    evals: list[float],
    losses: list[float] | None = None,
    *,
    synthetic: bool = False,
    status: str = "complete",
    higher_is_better: bool = True,
) -> RunRecord:
    losses = losses or [1.0 / (i + 1) for i in range(len(evals))]
    solo = mode.startswith("solo")
    world = 1 if solo else 2
    epochs = [
        EpochRow(
            epoch=i, loss=loss, eval=ev, epoch_ms=1000 * total / len(evals),
            syncs=None if solo else 10, avg_sync_ms=None if solo else 4.0,
            batch_share=None if solo else [0.66, 0.34],
            rank_speed=SPEEDS.get(mode, [900.0, 450.0]),
            # over the epoch's wall time: lower than over compute time, and not what the
            # breakdown may use
            throughput=[0.7 * v for v in SPEEDS.get(mode, [900.0, 450.0])],
            anchor=None if solo or mode.endswith("sync") else 10 + i,
        )
        for i, (ev, loss) in enumerate(zip(evals, losses, strict=True))
    ]  # fmt: skip
    ranks = [
        RankTime(rank=r, compute_s=0.8 * total, sync_s=0.05 * total, data_s=0.01 * total,
                 idle_s=0.14 * total, wall_s=total,
                 idle_causes={"sync_wait": 0.1 * total, "epoch_boundary": 0.04 * total})
        for r in range(world)
    ]  # fmt: skip
    return RunRecord(
        model=model, mode=mode, status=status, dataset="mnist",
        data_source="cifar10: SYNTHETIC stand-in" if synthetic else "mnist: real subset",
        synthetic=synthetic, devices=["cpu"] * world, slowdown={} if solo else {"1": 2.0},
        seed=42, batch_size=64, epochs_planned=len(evals), batches_per_epoch=None, lr_scale=1.0,
        eval_name="accuracy" if higher_is_better else "val_ce", higher_is_better=higher_is_better,
        target=92.0 if higher_is_better else 1.5, hardware=HW, started="2026-01-01T00:00:00",
        total_s=total, epochs=epochs, ranks=ranks, anchor_changes=None if solo else 3,
        throttles=0, error=None if status == "complete" else "DdpError: rank 1 died",
    )  # fmt: skip


@pytest.fixture
def make_record() -> Callable[..., RunRecord]:
    """``make_record(model, mode, total_s, evals, losses=None, *, synthetic, status, ...)``."""
    return record


def digits_like(folder: Path, n_train: int = 2000, n_test: int = 500) -> None:
    """A seeded, learnable 28x28 10-class set in MNIST's IDX layout (one bright bar per class)."""
    rng = np.random.default_rng(0)
    for stem, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 28, 28))
        for i, k in enumerate(labels):
            images[i, 2 + 2 * k : 4 + 2 * k, 4:24] = 255
        (folder / f"{stem}-images-idx3-ubyte").write_bytes(idx_images(images))
        (folder / f"{stem}-labels-idx1-ubyte").write_bytes(idx_labels(labels))


@pytest.fixture
def digits_dir(tmp_path: Path) -> Path:
    """A folder holding :func:`digits_like`'s four IDX files (for ``--data-dir``)."""
    folder = tmp_path / "data"
    folder.mkdir()
    digits_like(folder)
    return folder


def _run_bench(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FLODL_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_bench", *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture
def run_bench() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``run_bench(*args, cwd, timeout)``: ``python -m ddp_bench ARGS`` offline in ``cwd``; fails
    the test with the output's tail when it exits non-zero."""
    return _run_bench
