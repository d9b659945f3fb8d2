"""UtilizationSampler: CPU percent from a fake CPU clock, the minimum interval, GPU readers, and
what it records into a Timeline."""

from __future__ import annotations

import threading
import time

import pytest

from flodl_core import ConfigError
from flodl_ddp import Timeline
from flodl_ddp._utilization import (
    SmiPoller,
    UtilizationSample,
    UtilizationSampler,
    parse_smi,
    torch_gpu_reader,
)


class FakeCpu:
    """A CPU-time clock the test moves by hand."""

    def __init__(self) -> None:
        self.s = 0.0

    def __call__(self) -> float:
        return self.s


def test_cpu_percent_between_samples() -> None:
    cpu = FakeCpu()
    s = UtilizationSampler("cpu", cpu_time=cpu, min_interval_s=0.1)
    assert not s.reads_gpu
    s.start(10.0)
    cpu.s = 0.15  # 150 ms of CPU in 200 ms of wall time: 75 %
    got = s.maybe_sample(10.2)
    assert got == UtilizationSample(10.2, pytest.approx(0.2), pytest.approx(75.0), None)
    cpu.s = 0.55  # two threads busy for 200 ms: 200 % of one core
    got = s.maybe_sample(10.4)
    assert got is not None and got.cpu_pct == pytest.approx(200.0)
    assert got.interval_s == pytest.approx(0.2)


def test_min_interval_and_first_call() -> None:
    cpu = FakeCpu()
    s = UtilizationSampler(cpu_time=cpu, min_interval_s=0.1)
    assert s.maybe_sample(5.0) is None  # the first call only takes the reference reading
    cpu.s = 0.01
    assert s.maybe_sample(5.05) is None  # too soon: nothing read, the reference stays
    cpu.s = 0.05
    got = s.maybe_sample(5.1)
    assert got is not None and got.cpu_pct == pytest.approx(50.0)  # 50 ms over 100 ms
    assert s.maybe_sample(5.15) is None
    # sample() reads whatever the interval (e.g. at an epoch's end)
    cpu.s = 0.06
    forced = s.sample(5.12)
    assert forced is not None and forced.cpu_pct == pytest.approx(50.0)
    assert s.sample(5.12) is None  # no time has passed


def test_cpu_time_going_backwards_reads_zero() -> None:
    cpu = FakeCpu()
    cpu.s = 1.0
    s = UtilizationSampler(cpu_time=cpu, min_interval_s=0.0)
    s.start(0.0)
    cpu.s = 0.5
    got = s.sample(1.0)
    assert got is not None and got.cpu_pct == 0.0


def test_gpu_reader_clamped_and_failures_read_none() -> None:
    values: list[object] = [55.0, 130.0, None, float("nan"), RuntimeError("NVML gone"), -3]

    def gpu() -> float | None:
        v = values.pop(0)
        if isinstance(v, Exception):
            raise v
        return v  # type: ignore[return-value]

    s = UtilizationSampler("cuda:0", cpu_time=FakeCpu(), gpu=gpu, min_interval_s=0.0)
    assert s.reads_gpu
    s.start(0.0)
    got = [s.sample(float(i)).gpu_pct for i in range(1, 7)]  # type: ignore[union-attr]
    assert got == [55.0, 100.0, None, None, None, 0.0]


def test_auto_reads_no_gpu_on_a_cpu_device() -> None:
    assert not UtilizationSampler("cpu").reads_gpu
    assert not UtilizationSampler("cuda:0", gpu=None).reads_gpu


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="min_interval_s must be a finite number"):
        UtilizationSampler(min_interval_s=-1)
    with pytest.raises(ConfigError, match="gpu must be 'auto', None or a callable"):
        UtilizationSampler(gpu="nvml")  # type: ignore[arg-type]


def test_real_process_time_sees_busy_work() -> None:
    s = UtilizationSampler(min_interval_s=0.0)
    t0 = time.perf_counter()
    s.start(t0)
    while time.perf_counter() - t0 < 0.05:
        pass  # busy: this thread uses a core the whole time
    got = s.sample(time.perf_counter())
    assert got is not None and got.cpu_pct > 20.0  # a loaded 2-core machine still shows it
    assert got.gpu_pct is None


def test_parse_smi() -> None:
    assert parse_smi("37\n") == 37.0
    assert parse_smi(" 4 \n12\n") == 4.0
    assert parse_smi("[N/A]") is None and parse_smi("") is None


def test_torch_reader_absent_without_cuda_or_nvml() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA machine may have NVML")
    assert torch_gpu_reader(0) is None


def test_smi_poller_reads_in_the_background_and_stops() -> None:
    calls = threading.Event()
    readings = iter([42.0, 43.0, 44.0])

    def query() -> float | None:
        calls.set()
        return next(readings, 44.0)

    poller = SmiPoller(query, interval_s=0.01)
    try:
        assert calls.wait(5.0)
        deadline = time.monotonic() + 5.0
        while poller.latest() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert poller.latest() in (42.0, 43.0, 44.0)
    finally:
        poller.close()
    assert not poller._thread.is_alive()


def test_close_stops_the_poller_and_is_idempotent() -> None:
    closed: list[int] = []
    s = UtilizationSampler(cpu_time=FakeCpu(), gpu=None)
    s._closers.append(lambda: closed.append(1))
    with s:
        pass
    s.close()
    assert closed == [1]


def test_samples_recorded_into_a_timeline() -> None:
    """What a rank's engine does once per batch: maybe_sample, then Timeline.sample."""
    cpu = FakeCpu()
    tl = Timeline(origin=0.0)
    s = UtilizationSampler(cpu_time=cpu, gpu=lambda: 80.0, min_interval_s=0.1)
    s.start(0.0)
    for i in range(1, 11):  # ten 50 ms batches, each using 40 ms of CPU
        cpu.s += 0.04
        got = s.maybe_sample(0.05 * i)
        if got is not None:
            tl.sample(1, got.t, cpu=got.cpu_pct, gpu=got.gpu_pct)
    assert [round(u.t, 2) for u in tl.samples] == [0.1, 0.2, 0.3, 0.4, 0.5]
    u = tl.summary()["utilization"][1]
    assert u["cpu_avg_pct"] == pytest.approx(80.0) and u["gpu_avg_pct"] == 80.0
