"""The slowdown testing aid: a CPU rank's extra time is spent busy, and lasts as asked."""

from __future__ import annotations

import time

import torch

from flodl_ddp._slowdown import Slowdown


def test_factor_one_is_inactive() -> None:
    s = Slowdown(1.0, torch.device("cpu"))
    assert not s.active
    assert s.after_batch(time.perf_counter() - 0.05) == 0.0


def test_cpu_pause_is_busy_and_lasts_factor_minus_one_batches() -> None:
    s = Slowdown(3.0, torch.device("cpu"))
    batch_s = 0.02
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    pause = s.after_batch(wall0 - batch_s)  # a batch that started 20 ms ago
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    assert pause >= 2 * batch_s  # (3 - 1) x the batch, plus the few µs since `started`
    assert wall >= pause
    # Busy, not asleep: a slower processor stays busy for the whole batch. The thread's CPU
    # time grows with the pause (at least half of it even on a machine that preempts us).
    assert cpu >= 0.5 * pause
