from __future__ import annotations

import pytest
import torch

from flodl_core import DataLoader
from flodl_core.data import _memory

GB = 10**9
CUDA = torch.device("cuda")
CPU = torch.device("cpu")


@pytest.fixture
def vram(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, int] | None]:
    """A fake CUDA probe: set ``vram["info"] = (free, total)`` or ``None`` (probe failure)."""
    state: dict[str, tuple[int, int] | None] = {"info": (6 * GB, 10 * GB)}
    monkeypatch.setattr(_memory, "cuda_memory", lambda device: state["info"])
    return state


def test_cuda_resident_rule(vram: dict[str, tuple[int, int] | None]) -> None:
    # budget = 0.9 * total - used = 9 GB - 4 GB
    assert _memory.resident_fits(int(4.9 * GB), CUDA, 0.9)
    assert not _memory.resident_fits(int(5.1 * GB), CUDA, 0.9)
    assert not _memory.resident_fits(int(1.1 * GB), CUDA, 0.5)  # 5 GB - 4 GB
    vram["info"] = None
    assert not _memory.resident_fits(1, CUDA, 0.9)  # a failed probe streams


def test_cpu_resident_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory, "host_available_bytes", lambda: 1000)
    assert _memory.resident_fits(500, CPU, 0.9) and not _memory.resident_fits(501, CPU, 0.9)
    monkeypatch.setattr(_memory, "host_available_bytes", lambda: None)
    assert _memory.resident_fits(10**15, CPU, 0.9)  # unknown: assume it fits


def test_cuda_prefetch_depth(vram: dict[str, tuple[int, int] | None]) -> None:
    # (10 GB * 0.9 - 4 GB used - 1 GB reserve) / 0.5 GB = 8 batches
    assert _memory.auto_prefetch_depth(CUDA, GB // 2, 0.9, 100) == 8
    assert _memory.auto_prefetch_depth(CUDA, GB // 2, 0.9, 5) == 5  # capped at one epoch
    # max usage is clamped to [0.5, 0.99]: 0.2 counts as 0.5 -> (5 - 4 - 1) GB -> 0
    assert _memory.auto_prefetch_depth(CUDA, GB // 2, 0.2, 100) == 0
    vram["info"] = (GB // 10, 10 * GB)  # nearly full device
    assert _memory.auto_prefetch_depth(CUDA, GB // 2, 0.9, 100) == 0
    vram["info"] = None
    assert _memory.auto_prefetch_depth(CUDA, GB // 2, 0.9, 100) == 2


def test_host_prefetch_depth() -> None:
    assert _memory.auto_prefetch_depth(CPU, 1000, 0.9, 100) == 2
    assert _memory.auto_prefetch_depth(CPU, 1000, 0.9, 1) == 1
    assert _memory.auto_prefetch_depth(CPU, 0, 0.9, 100) == 2


def test_host_available_bytes_reads_the_machine() -> None:
    avail = _memory.host_available_bytes()
    assert avail is None or avail > 0


def test_loader_streams_what_does_not_fit_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_memory, "host_available_bytes", lambda: 100)
    samples = [torch.full((4,), float(i)) for i in range(40)]  # 640 bytes > 50 allowed
    assert not DataLoader(samples, batch_size=8).is_resident
    # In-memory tensors are kept in place whatever the budget: that costs nothing more.
    assert DataLoader((torch.stack(samples),), batch_size=8).is_resident
