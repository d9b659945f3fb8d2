"""Resource sampling without psutil and without initialising CUDA.

CPU and RAM come from ``/proc`` (Linux), with portable fallbacks (``os.times``) elsewhere. GPUs
are listed through :func:`flodl_core.detect_gpus` (``nvidia-smi``), polled by a background thread
about once a second and averaged since the previous sample, as a single reading at epoch end would
mostly see the idle gap between epochs. This process's VRAM is read from ``torch.cuda`` only when
CUDA is already initialised: a monitor must never be the thing that creates a CUDA context.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flodl_core import GpuInfo, detect_gpus

from ._format import format_bytes


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one sample. Bytes and percent; ``None`` when unknown."""

    dev: int
    name: str
    util: float | None = None
    vram_alloc: int | None = None
    vram_total: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class ResourceSample:
    """Machine and process resources at one ``log()``. Percent values are 0-100."""

    cpu: float | None = None  # whole machine, busy share since the previous sample
    proc_cpu: float | None = None  # this process, as a share of the whole machine
    ram_used: int | None = None
    ram_total: int | None = None
    rss: int | None = None  # this process's resident memory
    gpu: float | None = None  # mean utilisation over GPUs
    vram_alloc: int | None = None  # this process's allocator-reserved bytes
    vram_total: int | None = None
    gpus: tuple[GpuSample, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """The dashboard's ``resources`` object; unknown values are left out."""
        return {k: v for k, v in self.__dict__.items() if k != "gpus" and v is not None}

    def summary(self) -> str:
        """One line: ``"CPU 23%  RAM 5.1 GB / 23.0 GB  GPU 81%"``."""
        parts: list[str] = []
        if self.cpu is not None:
            parts.append(f"CPU {self.cpu:.0f}%")
        if self.ram_used is not None and self.ram_total is not None:
            parts.append(f"RAM {format_bytes(self.ram_used)} / {format_bytes(self.ram_total)}")
        if len(self.gpus) > 1:
            parts.extend(f"GPU{g.dev} {g.util:.0f}%" for g in self.gpus if g.util is not None)
        elif self.gpu is not None:
            parts.append(f"GPU {self.gpu:.0f}%")
        if self.vram_alloc is not None:
            parts.append(f"VRAM {format_bytes(self.vram_alloc)}")
        return "  ".join(parts)


def _read(path: str, size: int = 4096) -> bytes | None:
    """Raw read of a small procfs file (os-level: ~5x cheaper than open() + text decoding)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def _read_cpu_jiffies(proc: str) -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine from the first line of ``/proc/stat``."""
    data = _read(proc + "/stat", 512)
    if data is None:
        return None
    fields = data.split(b"\n", 1)[0].split()
    if len(fields) < 5 or fields[0] != b"cpu":
        return None
    values = [int(v) for v in fields[1:9]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values)  # guest time is already counted in user
    return total - idle, total


def _meminfo_kb(data: bytes, key: bytes) -> int | None:
    at = data.find(key)
    if at < 0:
        return None
    return int(data[at + len(key) : data.index(b"kB", at)])


def _read_meminfo(proc: str) -> tuple[int, int] | None:
    """(used, total) bytes; used = MemTotal - MemAvailable."""
    data = _read(proc + "/meminfo", 8192)
    if data is None:
        return None
    total = _meminfo_kb(data, b"MemTotal:")
    if total is None:
        return None
    avail = _meminfo_kb(data, b"MemAvailable:")
    if avail is None:
        avail = _meminfo_kb(data, b"MemFree:") or 0
    return (total - avail) * 1024, total * 1024


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _read_rss(proc: str) -> int | None:
    data = _read(proc + "/self/statm", 256)
    try:
        return int(data.split()[1]) * _PAGE if data else None
    except (ValueError, IndexError):
        return None


def _torch_vram() -> list[tuple[int, int | None]] | None:
    """Per-device (reserved, total) bytes, or ``None`` unless CUDA is already initialised."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    out: list[tuple[int, int | None]] = []
    for i in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(i).total_memory
        out.append((torch.cuda.memory_reserved(i), total))
    return out


class _GpuPoller:
    """Polls GPU utilisation in a daemon thread; :meth:`take` averages since the last take."""

    def __init__(self, query: Callable[[], list[GpuInfo]], period: float) -> None:
        self._query = query
        self._period = period
        self._lock = threading.Lock()
        self._sums: dict[int, float] = {}
        self._counts: dict[int, int] = {}
        self._last: dict[int, GpuInfo] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flodl-gpu-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self._period)

    def poll_once(self) -> None:
        gpus = self._query()
        with self._lock:
            for g in gpus:
                self._last[g.index] = g
                if g.utilization is not None:
                    self._sums[g.index] = self._sums.get(g.index, 0.0) + g.utilization
                    self._counts[g.index] = self._counts.get(g.index, 0) + 1

    def take(self) -> list[tuple[GpuInfo, float | None]]:
        with self._lock:
            out = []
            for idx, info in sorted(self._last.items()):
                n = self._counts.get(idx, 0)
                avg = self._sums[idx] / n if n else info.utilization
                out.append((info, avg))
            self._sums.clear()
            self._counts.clear()
            return out

    def stop(self) -> None:
        self._stop.set()


class ResourceSampler:
    """Samples CPU, RAM and GPUs; each :meth:`sample` reports usage since the previous one.

    ``gpus=None`` detects GPUs once with ``nvidia-smi`` and polls them every ``poll_seconds``;
    pass a list (possibly empty) to skip detection. ``proc`` is the procfs root (tests point it at
    fixture files).
    """

    def __init__(
        self,
        *,
        gpus: Sequence[GpuInfo] | None = None,
        poll_seconds: float = 1.0,
        proc: Path = Path("/proc"),
        gpu_query: Callable[[], list[GpuInfo]] = detect_gpus,
    ) -> None:
        self._proc = str(proc)
        self._ncpu = os.cpu_count() or 1
        found = list(gpu_query() if gpus is None else gpus)
        self.gpu_names: list[str] = [g.name for g in found]
        self._poller = _GpuPoller(gpu_query, poll_seconds) if found and gpus is None else None
        self._static_gpus = found if self._poller is None else []
        self._prev_jiffies = _read_cpu_jiffies(self._proc)
        self._prev_proc = (time.perf_counter(), self._proc_seconds())

    @staticmethod
    def _proc_seconds() -> float:
        t = os.times()
        return t.user + t.system

    def hardware_summary(self) -> str:
        """``"2 CPUs, 23.0 GB RAM, 1x NVIDIA H100"`` for the dashboard header."""
        parts = [f"{self._ncpu} CPU{'s' if self._ncpu != 1 else ''}"]
        mem = _read_meminfo(self._proc)
        if mem is not None:
            parts.append(f"{format_bytes(mem[1])} RAM")
        if self.gpu_names:
            names = sorted(set(self.gpu_names))
            parts.extend(f"{self.gpu_names.count(n)}x {n}" for n in names)
        return ", ".join(parts)

    def sample(self) -> ResourceSample:
        cpu: float | None = None
        jiffies = _read_cpu_jiffies(self._proc)
        if jiffies is not None and self._prev_jiffies is not None:
            busy = jiffies[0] - self._prev_jiffies[0]
            total = jiffies[1] - self._prev_jiffies[1]
            cpu = 100.0 * busy / total if total > 0 else None
        self._prev_jiffies = jiffies

        now, proc_s = time.perf_counter(), self._proc_seconds()
        wall = now - self._prev_proc[0]
        proc_cpu = 100.0 * (proc_s - self._prev_proc[1]) / (wall * self._ncpu) if wall > 0 else None
        self._prev_proc = (now, proc_s)

        mem = _read_meminfo(self._proc)
        gpus = self._gpu_samples()
        utils = [g.util for g in gpus if g.util is not None]
        allocs = [g.vram_alloc for g in gpus if g.vram_alloc is not None]
        known = [g for g in gpus if g.vram_alloc is not None]
        totals = [g.vram_total for g in known if g.vram_total is not None]
        return ResourceSample(
            cpu=cpu,
            proc_cpu=min(proc_cpu, 100.0) if proc_cpu is not None else None,
            ram_used=mem[0] if mem else None,
            ram_total=mem[1] if mem else None,
            rss=_read_rss(self._proc),
            gpu=sum(utils) / len(utils) if utils else None,
            vram_alloc=sum(allocs) if allocs else None,
            vram_total=sum(totals) if totals else None,
            gpus=tuple(gpus),
        )

    def _gpu_samples(self) -> list[GpuSample]:
        if self._poller is not None:
            polled = self._poller.take()
        else:
            polled = [(g, g.utilization) for g in self._static_gpus]
        vram = _torch_vram()
        if not polled and vram:  # CUDA is up but nvidia-smi is absent (containers, ROCm)
            return [
                GpuSample(dev=i, name=f"cuda:{i}", vram_alloc=a, vram_total=t)
                for i, (a, t) in enumerate(vram)
            ]
        out: list[GpuSample] = []
        for i, (info, util) in enumerate(polled):
            alloc, total = vram[i] if vram is not None and i < len(vram) else (None, None)
            out.append(
                GpuSample(
                    dev=info.index,
                    name=info.name,
                    util=util,
                    vram_alloc=alloc,
                    vram_total=total if total is not None else info.total_memory,
                )
            )
        return out

    def close(self) -> None:
        """Stop the GPU poller thread (idempotent)."""
        if self._poller is not None:
            self._poller.stop()
