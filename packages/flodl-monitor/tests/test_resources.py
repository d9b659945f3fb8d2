"""Resource sampling from procfs fixtures and a fake GPU query (no GPU, no CUDA init)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from flodl_core import GpuInfo
from flodl_monitor import ResourceSampler

MEMINFO = "MemTotal:       16384000 kB\nMemFree:         1000000 kB\nMemAvailable:    4096000 kB\n"


def _proc(tmp_path: Path, busy: int, idle: int) -> Path:
    (tmp_path / "self").mkdir(exist_ok=True)
    # user nice system idle iowait irq softirq steal
    (tmp_path / "stat").write_text(f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    (tmp_path / "meminfo").write_text(MEMINFO)
    (tmp_path / "self" / "statm").write_text("1000 250 0 0 0 0 0\n")
    return tmp_path


def test_cpu_is_the_busy_share_since_the_previous_sample(tmp_path: Path) -> None:
    proc = _proc(tmp_path, busy=100, idle=100)
    s = ResourceSampler(gpus=[], proc=proc)
    _proc(tmp_path, busy=175, idle=125)  # 75 busy of 100 jiffies
    r = s.sample()
    assert r.cpu == 75.0
    assert r.ram_total == 16384000 * 1024 and r.ram_used == (16384000 - 4096000) * 1024
    assert r.rss is not None and r.rss > 0
    assert r.gpu is None and r.gpus == () and r.vram_alloc is None
    assert set(r.to_json()) == {"cpu", "proc_cpu", "ram_used", "ram_total", "rss"}
    assert r.summary().startswith("CPU 75%  RAM 11.7 GB / 15.6 GB")


def test_missing_procfs_degrades_to_unknown(tmp_path: Path) -> None:
    s = ResourceSampler(gpus=[], proc=tmp_path / "nothing")
    r = s.sample()
    assert r.cpu is None and r.ram_used is None and r.rss is None
    assert r.proc_cpu is not None  # os.times works everywhere
    assert "cpu" not in r.to_json()
    assert s.hardware_summary().endswith("CPUs") or "CPU" in s.hardware_summary()


def test_proc_cpu_counts_this_process(tmp_path: Path) -> None:
    s = ResourceSampler(gpus=[], proc=_proc(tmp_path, 1, 1))
    s.sample()
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:  # burn CPU for 50 ms
        pass
    assert s.sample().proc_cpu > 0


def test_gpu_utilisation_is_averaged_between_samples(tmp_path: Path) -> None:
    readings = iter([0.0, 10.0, 30.0])  # detection, the poller thread's first poll, ours
    polled = threading.Event()

    def query() -> list[GpuInfo]:
        u = next(readings, 70.0)
        if u == 10.0:
            polled.set()
        return [
            GpuInfo(0, "Fake A100", "nvidia", total_memory=40 << 30, utilization=u),
            GpuInfo(1, "Fake A100", "nvidia", total_memory=40 << 30, utilization=u / 2),
        ]

    s = ResourceSampler(proc=_proc(tmp_path, 1, 1), gpu_query=query, poll_seconds=3600)
    poller = s._poller
    assert poller is not None
    assert polled.wait(10)
    deadline = time.monotonic() + 10
    while poller._counts.get(0) != 1 and time.monotonic() < deadline:  # thread's poll landed
        time.sleep(0.001)
    poller.poll_once()
    r = s.sample()
    assert [g.util for g in r.gpus] == [20.0, 10.0]
    assert r.gpu == 15.0
    assert r.vram_alloc is None  # CUDA is not initialised here: no allocator numbers
    assert r.gpus[0].vram_total == 40 << 30
    assert "2x Fake A100" in s.hardware_summary()
    assert "GPU0 20%  GPU1 10%" in r.summary()
    s.close()


def test_sampling_never_initialises_cuda(tmp_path: Path) -> None:
    torch = sys.modules.get("torch")
    s = ResourceSampler(gpus=[], proc=_proc(tmp_path, 1, 1))
    s.sample()
    assert torch is None or not torch.cuda.is_initialized()
