"""CPU and GPU utilization of one rank, sampled while it trains, for the timeline.

A :class:`UtilizationSampler` is asked once per batch and reads at most once per
``min_interval_s`` (100 ms by default), so a 1 ms batch pays for a clock reading and a comparison:

- **CPU**: this process's CPU time (``time.process_time``: user + system, every thread) between
  two readings over the wall time between them, in percent of one core as ``top`` shows it (four
  busy intra-op threads read up to 400 %). A rank waiting in a collective or asleep reads low.
- **GPU**: on a CUDA device only, the device's busy percentage (NVML through
  ``torch.cuda.utilization``, which needs ``pynvml``; else ``nvidia-smi`` polled from a
  background thread at most every ``smi_interval_s``, so the training thread never waits for a
  subprocess). Other processes on the same GPU count too. ``None`` without a reading.

The readers are injected (``cpu_time``, ``gpu``), so the arithmetic is tested with a fake clock.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from flodl_core import ConfigError, check_finite

MIN_INTERVAL_S = 0.1
"""Readings are at least this far apart (seconds)."""

SMI_INTERVAL_S = 1.0
"""``nvidia-smi`` (a subprocess) is asked at most this often (seconds)."""

GpuReader = Callable[[], "float | None"]


@dataclass(frozen=True)
class UtilizationSample:
    """The utilization of one rank over ``(t - interval_s, t]``, in percent.

    ``t`` is on the clock given to :meth:`UtilizationSampler.maybe_sample`; ``cpu_pct`` is of one
    core (may exceed 100 with several threads); ``gpu_pct`` is ``None`` without a reading.
    """

    t: float
    interval_s: float
    cpu_pct: float
    gpu_pct: float | None


def _check_interval(name: str, value: object) -> float:
    return check_finite(value, name, ge=0, expected="a finite number of seconds >= 0")


class UtilizationSampler:
    """Samples this process's CPU use and, on CUDA, its GPU's busy percentage.

    Args:
        device: the rank's device (``"cpu"``, ``"cuda:1"``, a ``torch.device``); GPU readings
            are attempted only for ``cuda``.
        min_interval_s: the least time between two readings.
        cpu_time: seconds of CPU this process has used (default ``time.process_time``).
        gpu: ``"auto"`` (NVML through torch, else ``nvidia-smi``, else none), ``None`` (no GPU
            readings), or a function returning the GPU's busy percentage (or ``None``).
    """

    def __init__(
        self,
        device: Any = "cpu",
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        cpu_time: Callable[[], float] = time.process_time,
        gpu: GpuReader | str | None = "auto",
    ) -> None:
        self.min_interval_s = _check_interval("min_interval_s", min_interval_s)
        self._cpu_time = cpu_time
        self._closers: list[Callable[[], None]] = []
        if gpu == "auto":
            self._gpu = _auto_gpu_reader(device, self._closers)
        elif gpu is None or callable(gpu):
            self._gpu = gpu
        else:
            raise ConfigError(f"gpu must be 'auto', None or a callable, got {gpu!r}")
        self._last_t: float | None = None
        self._last_cpu = 0.0

    @property
    def reads_gpu(self) -> bool:
        """Whether GPU readings are attempted."""
        return self._gpu is not None

    def start(self, now: float) -> None:
        """Take the reference reading at ``now`` (the first sample covers the time since)."""
        self._last_t, self._last_cpu = now, self._cpu_time()

    def maybe_sample(self, now: float) -> UtilizationSample | None:
        """A sample when ``min_interval_s`` has passed since the last one (or since
        :meth:`start`; the first call without :meth:`start` only starts), else ``None``."""
        # (a nanosecond of slack: a clock that advanced by exactly the interval, in floats)
        if self._last_t is not None and now - self._last_t < self.min_interval_s - 1e-9:
            return None
        return self.sample(now)  # the first call only starts

    def sample(self, now: float) -> UtilizationSample | None:
        """A sample now, whatever the interval (``None`` before any reference reading, or when
        no time has passed since the last one)."""
        if self._last_t is None:
            self.start(now)
        if now <= self._last_t:  # (just started, or no time has passed)
            return None
        cpu = self._cpu_time()
        interval = now - self._last_t
        pct = max(0.0, 100.0 * (cpu - self._last_cpu) / interval)
        self._last_t, self._last_cpu = now, cpu
        return UtilizationSample(now, interval, pct, self._read_gpu())

    def _read_gpu(self) -> float | None:
        try:
            v = None if self._gpu is None else self._gpu()
        except Exception:  # a driver hiccup must not stop training: no reading this time
            v = None
        ok = isinstance(v, (int, float)) and math.isfinite(v)
        return min(100.0, max(0.0, float(v))) if ok else None  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the background ``nvidia-smi`` poller, if any (idempotent)."""
        while self._closers:
            self._closers.pop()()

    def __enter__(self) -> UtilizationSampler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- GPU readers --------------------------------------------------------------------------------


def _cuda_index(device: Any) -> int | None:
    """The CUDA index of ``device``, or ``None`` when it is not a CUDA device."""
    kind, _, idx = str(device).partition(":")
    if kind != "cuda":
        return None
    if idx:
        return int(idx)
    try:
        return int(torch.cuda.current_device())
    except Exception:
        return 0


def torch_gpu_reader(index: int) -> GpuReader | None:
    """``torch.cuda.utilization(index)`` when it answers here (it needs NVML's Python binding),
    else ``None``."""
    try:
        torch.cuda.utilization(index)
    except Exception:
        return None
    return lambda: float(torch.cuda.utilization(index))


def parse_smi(text: str) -> float | None:
    """The percentage in ``nvidia-smi --query-gpu=utilization.gpu
    --format=csv,noheader,nounits`` output (``None`` for ``[N/A]`` or anything else)."""
    try:
        v = float(text.strip().splitlines()[0]) if text.strip() else math.nan
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def smi_query(index: int, timeout_s: float = 5.0) -> float | None:
    """One ``nvidia-smi`` reading of GPU ``index`` (``None`` when it fails)."""
    query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(
            [*query, "-i", str(index)], capture_output=True, text=True, timeout=timeout_s
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi(out.stdout) if out.returncode == 0 else None


class SmiPoller:
    """Reads ``query()`` every ``interval_s`` on a daemon thread; :meth:`latest` is the last
    reading (``None`` before the first). The training thread never waits for the subprocess."""

    def __init__(self, query: Callable[[], float | None], interval_s: float = SMI_INTERVAL_S):
        self._query = query
        self._interval = _check_interval("interval_s", interval_s)
        self._latest: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flodl-gpu-util", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._latest = self._query()
            self._stop.wait(self._interval)

    def latest(self) -> float | None:
        return self._latest

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)


def _auto_gpu_reader(device: Any, closers: list[Callable[[], None]]) -> GpuReader | None:
    index = _cuda_index(device)
    if index is None:
        return None
    reader = torch_gpu_reader(index)
    if reader is not None or shutil.which("nvidia-smi") is None:
        return reader
    poller = SmiPoller(lambda: smi_query(index))
    closers.append(poller.close)
    return poller.latest
