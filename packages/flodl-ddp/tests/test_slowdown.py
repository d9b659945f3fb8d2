"""The slowdown testing aid: a rank owes factor x its reference batch time minus what each batch
took, and pays it asleep, in pieces."""

from __future__ import annotations

import time

import pytest
import torch

from flodl_ddp import _slowdown
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
    assert s.after_batch(t - 0.012) == 0.0  # owes 12 ms: below the piece, nothing paid yet
    assert 0.012 <= s.owed < 0.014
    assert s.after_batch(time.perf_counter() - 0.012) == 0.0  # 24 ms
    w0 = time.perf_counter()
    paid = s.after_batch(w0 - 0.012)  # 36 ms owed -> paid now, in one piece
    assert paid >= 0.036 and s.owed == 0.0
    assert time.perf_counter() - w0 >= 0.036


class _StillClock:
    """``time`` for the slowdown module with a clock that stands at 0: a batch that "started" at
    ``-d`` took exactly ``d`` (a real clock's jitter makes a batch a few µs longer than the
    reference, and it then owes a few µs less than the reference)."""

    @staticmethod
    def perf_counter() -> float:
        return 0.0

    sleep = staticmethod(time.sleep)


def test_a_batch_slower_than_the_reference_owes_only_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Waking from a pause makes the next batches slower; the clock still reads factor x the
    reference (the lower quartile of recent batches), not factor x the slowed batch."""
    monkeypatch.setattr(_slowdown, "time", _StillClock)
    s = Slowdown(2.0, torch.device("cpu"), pay_every_s=10.0)  # never pays: read the debt
    for _ in range(8):
        s.after_batch(-0.010)
    assert 0.010 <= s.reference() < 0.0105
    owed = s.owed
    assert 0.080 <= owed < 0.082  # eight 10 ms batches owe 10 ms each
    s.after_batch(-0.015)  # a slowed batch: 2 x 10 - 15 = 5 ms
    assert 0.0045 <= s.owed - owed < 0.0055
    owed = s.owed
    s.after_batch(-0.030)  # longer than 2 x reference: owes nothing
    assert s.owed == owed
    s.after_batch(-0.004)  # shorter than the reference: owes its own time
    assert 0.004 <= s.owed - owed < 0.0045


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
