from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import ConfigError
from flodl_core.checkpoint import CpuWorker, ModelSnapshot, checkpoint_keys


def test_jobs_run_in_order_on_one_background_thread() -> None:
    seen: list[tuple[int, str]] = []
    with CpuWorker() as worker:
        futures = [
            worker.submit(lambda i=i: seen.append((i, threading.current_thread().name)))
            for i in range(5)
        ]
        worker.wait()
        assert worker.pending == 0
    assert [i for i, _ in seen] == list(range(5))
    assert len({name for _, name in seen}) == 1
    assert seen[0][1] != threading.current_thread().name
    assert all(f.done() for f in futures)


def test_submit_passes_arguments_and_returns_a_future() -> None:
    with CpuWorker() as worker:
        future = worker.submit(pow, 2, exp=10)
        assert future.result(timeout=5) == 1024


def test_errors_surface_on_wait_once() -> None:
    worker = CpuWorker()
    worker.submit(lambda: 1 / 0)
    worker.submit(lambda: [][1])
    with pytest.raises(ZeroDivisionError) as info:
        worker.wait()
    assert "1 more background job(s) failed" in "\n".join(info.value.__notes__)
    assert any("IndexError" in note for note in info.value.__notes__)
    worker.wait()  # already reported
    worker.close()


def test_errors_surface_on_close_and_exit() -> None:
    worker = CpuWorker()
    worker.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        worker.close()
    worker.close()  # idempotent
    with pytest.raises(ConfigError, match="CpuWorker is closed"):
        worker.submit(print)

    with pytest.raises(ZeroDivisionError), CpuWorker() as w:
        w.submit(lambda: 1 / 0)


def test_body_error_wins_and_carries_the_job_error() -> None:
    with pytest.raises(KeyError) as info, CpuWorker() as w:
        w.submit(lambda: 1 / 0)
        raise KeyError("body")
    assert any("ZeroDivisionError" in note for note in info.value.__notes__)


def test_close_waits_for_queued_jobs() -> None:
    done = []
    worker = CpuWorker()
    worker.submit(lambda: (time.sleep(0.05), done.append(1)))
    worker.submit(done.append, 2)
    assert worker.pending >= 1
    worker.close()
    assert done == [1, 2]


def test_background_checkpointing(tmp_path: Path) -> None:
    model = nn.Linear(8, 8)
    with CpuWorker() as worker:
        for epoch in range(3):
            with torch.no_grad():
                model.weight.add_(1.0)
            worker.submit(ModelSnapshot.capture(model).save, tmp_path / f"e{epoch}.fdl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e0.fdl", "e1.fdl", "e2.fdl"]
    assert [k.name for k in checkpoint_keys(tmp_path / "e2.fdl")] == ["weight", "bias"]
