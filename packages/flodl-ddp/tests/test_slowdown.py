"""The slowdown testing aid: a rank owes (factor - 1) x each batch and pays it asleep, in pieces."""

from __future__ import annotations

import time

import torch

from flodl_ddp._slowdown import Slowdown


def test_factor_one_is_inactive() -> None:
    s = Slowdown(1.0, torch.device("cpu"))
    assert not s.active
    assert s.after_batch(time.perf_counter() - 0.05) == 0.0


def test_pause_lasts_factor_minus_one_batches_asleep() -> None:
    s = Slowdown(3.0, torch.device("cpu"))
    batch_s = 0.02
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    pause = s.after_batch(wall0 - batch_s)  # a batch that started 20 ms ago: owes 40 ms
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    assert pause >= 2 * batch_s  # (3 - 1) x the batch, plus the few µs since `started`
    assert wall >= pause
    # Asleep, not busy: the simulated device must not take cycles from the other ranks.
    assert cpu < 0.5 * pause


def test_small_batches_are_owed_then_paid_in_one_piece() -> None:
    s = Slowdown(2.0, torch.device("cpu"), pay_every_s=0.03)
    t = time.perf_counter()
    assert s.after_batch(t - 0.01) == 0.0  # owes 10 ms: below the piece, nothing paid yet
    assert 0.01 <= s.owed < 0.012
    w0 = time.perf_counter()
    paid = s.after_batch(w0 - 0.025)  # 35 ms owed -> paid now, in one piece
    assert paid >= 0.035 and s.owed == 0.0
    assert time.perf_counter() - w0 >= 0.035


def test_settle_pays_everything_owed_and_nothing_twice() -> None:
    s = Slowdown(3.0, torch.device("cpu"), pay_every_s=1.0)
    s.after_batch(time.perf_counter() - 0.005)  # owes 2 x 5 ms
    w0 = time.perf_counter()
    paid = s.settle()
    assert paid >= 0.01 and time.perf_counter() - w0 >= paid
    assert s.owed == 0.0 and s.settle() == 0.0


def test_pay_every_zero_pays_after_each_batch() -> None:
    s = Slowdown(2.0, torch.device("cpu"), pay_every_s=0.0)
    assert s.after_batch(time.perf_counter() - 0.004) >= 0.004
    assert s.owed == 0.0
