"""The ETA rule, fed with a fake clock: start-up and warm-up are not an epoch's cost."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest

from flodl_monitor import Monitor, ResourceSampler
from flodl_monitor._eta import EtaEstimator


class FakeClock:
    """``time`` for the monitor module: ``perf_counter`` returns what the test sets."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    from flodl_monitor import _monitor

    fake = FakeClock()
    monkeypatch.setattr(
        _monitor,
        "time",
        SimpleNamespace(
            **{
                "perf_counter": fake.perf_counter,
                "monotonic": fake.monotonic,
                "sleep": time.sleep,
            }
        ),
    )
    return fake


def _monitor(total: int) -> Monitor:
    return Monitor(total, stream=io.StringIO(), resources=ResourceSampler(gpus=[]))


def test_first_epoch_eta_leaves_out_the_start_up(clock: FakeClock) -> None:
    # 30 epochs of 0.15 s after 3 s of start-up (model build, data, server): the wall time
    # since start, spread over the epochs, said 29 * 3.15 s.
    m = _monitor(30)
    clock.advance(3.0)
    clock.advance(0.15)
    rec = m.log(0, 0.15, {"loss": 1.0})
    assert rec.eta == pytest.approx(29 * 0.15)
    assert rec.elapsed == pytest.approx(3.15)  # the record still says the whole wall time


def test_later_epochs_use_the_steady_state_wall_time(clock: FakeClock) -> None:
    m = _monitor(10)
    clock.advance(2.0)  # start-up
    clock.advance(0.6)  # a slow first epoch (warm-up)
    assert m.log(0, 0.6, {"loss": 1.0}).eta == pytest.approx(9 * 0.6)
    clock.advance(0.25)  # 0.2 s of training + 0.05 s of evaluation between logs
    assert m.log(1, 0.2, {"loss": 1.0}).eta == pytest.approx(8 * 0.25)
    clock.advance(0.35)
    assert m.log(2, 0.3, {"loss": 1.0}).eta == pytest.approx(7 * 0.3)  # mean of 0.25, 0.35
    clock.advance(0.6)  # two epochs, logged once
    assert m.log(4, 0.3, {"loss": 1.0}).eta == pytest.approx(5 * 0.3)
    clock.advance(1.5)
    assert m.log(9, 0.3, {"loss": 1.0}).eta is None


def test_tracked_steps_leave_out_the_first_step_warm_up(clock: FakeClock) -> None:
    # 10 epochs of 8 steps at 0.02 s, but the very first step takes 0.5 s.
    m = _monitor(10)
    clock.advance(5.0)
    t0 = clock.now
    steps = []
    for i, batch in enumerate(m.track(range(8))):
        steps.append(batch)
        clock.advance(0.5 if i == 0 else 0.02)
    clock.advance(0.01)  # after the loop: flush, metrics
    assert steps == list(range(8))
    rec = m.log(0, clock.now - t0, {"loss": 1.0})
    assert rec.eta == pytest.approx(9 * (8 * 0.02 + 0.01))
    # the second epoch's loop passes through untimed; the steady state takes over
    t1 = clock.now
    for _ in m.track(range(8)):
        clock.advance(0.02)
    clock.advance(0.01)
    assert m.log(1, clock.now - t1, {"loss": 1.0}).eta == pytest.approx(8 * 0.17)


def test_tracking_a_second_loop_in_the_first_epoch_does_not_mix_it_in(clock: FakeClock) -> None:
    m = _monitor(4)
    t0 = clock.now
    for i, _ in enumerate(m.track(range(4))):
        clock.advance(1.0 if i == 0 else 0.1)
    for _ in m.track(range(3)):  # evaluation: not timed
        clock.advance(0.05)
    rec = m.log(0, clock.now - t0, {"loss": 1.0})
    assert rec.eta == pytest.approx(3 * (1.45 - 0.9))


def test_rule_edge_cases() -> None:
    eta = EtaEstimator(total=5, start=0.0)
    # no duration and nothing tracked: the wall time since start
    assert eta.update(0, 0.0, now=2.0) == pytest.approx(4 * 2.0)
    # a resumed run: its first logged epoch is 3, and only it has run here
    resumed = EtaEstimator(total=10, start=0.0)
    assert resumed.update(3, 0.5, now=7.0) == pytest.approx(6 * 0.5)
    assert resumed.update(4, 0.5, now=7.4) == pytest.approx(5 * 0.4)
    # tracked steps without a duration: the loop at the steady pace
    steps = EtaEstimator(total=3, start=0.0)
    assert steps.loop_started(1.0)
    for t in (2.0, 2.1, 2.2):
        steps.step_ended(t)
    assert steps.update(0, 0.0, now=2.3) == pytest.approx(2 * 0.3)
    # a single tracked step says nothing about the pace: the duration is used
    one = EtaEstimator(total=3, start=0.0)
    one.loop_started(0.0)
    one.step_ended(1.0)
    assert one.update(0, 0.7, now=1.0) == pytest.approx(2 * 0.7)
    # warm-up spread over the first steps: the later half sets the pace
    spread = EtaEstimator(total=2, start=0.0)
    spread.loop_started(0.0)
    t = 0.0
    for dt in (0.4, 0.2, 0.1, 0.01, 0.01, 0.01, 0.01, 0.01):
        t += dt
        spread.step_ended(t)
    assert spread.update(0, t, now=t) == pytest.approx(8 * 0.01)
    # a later half slower than the first (load) never makes the loop cost more than it took
    slower = EtaEstimator(total=2, start=0.0)
    slower.loop_started(0.0)
    for t in (0.1, 0.2, 0.5, 0.8):
        slower.step_ended(t)
    assert slower.update(0, 0.8, now=0.8) == pytest.approx(0.8)
    # a duration that timed only part of the loop never goes below the loop itself
    part = EtaEstimator(total=2, start=0.0)
    part.loop_started(0.0)
    for t in (1.0, 1.1, 1.2, 1.3):
        part.step_ended(t)
    assert part.update(0, 0.2, now=1.3) == pytest.approx(0.4)
    assert part.update(1, 0.1, now=1.5) is None


def test_a_long_first_loop_is_timed_in_bounded_memory() -> None:
    from flodl_monitor import _eta

    eta = EtaEstimator(total=3, start=0.0)
    eta.loop_started(0.0)
    t = 5.0  # a 5 s first step, then 100,000 steps of 1 ms
    eta.step_ended(t)
    for _ in range(100_000):
        t += 0.001
        eta.step_ended(t)
    steps = eta._steps
    assert steps is not None and len(steps.ends) < _eta._KEEP and steps.stride > 1
    assert eta.update(0, t, now=t) == pytest.approx(2 * 100_001 * 0.001, rel=1e-6)
