"""How much memory a loader may use on its target device.

Resident rule (CUDA, as in floDl (Rust)): the whole dataset goes resident iff
``bytes < vram_max_usage * total - used``. On the host the dataset must fit in half of the
available RAM (the rest is the training process's own); where that cannot be read it is assumed
to fit. Streaming prefetch depth on CUDA is the number of batches that fit in the same budget once
an activation reserve is set aside; on the host it is a fixed small depth, enough to overlap
``get_batch`` with the step.
"""

from __future__ import annotations

import math
import os

import torch

HOST_RESIDENT_FRACTION = 0.5
"""Share of the host's available RAM a resident dataset may take."""

ACTIVATION_RESERVE_FRACTION = 0.10
"""Share of total VRAM kept free for activations when sizing the prefetch queue."""

HOST_PREFETCH_DEPTH = 2
"""Prefetch depth on a CPU target (and when device memory cannot be probed)."""


def host_available_bytes() -> int | None:
    """``MemAvailable`` from ``/proc/meminfo`` (Linux), else free physical pages, else ``None``."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def cuda_memory(device: torch.device) -> tuple[int, int] | None:
    """``(free, total)`` bytes of a CUDA device, or ``None`` when it cannot be probed."""
    try:
        free, total = torch.cuda.mem_get_info(device)
    except (RuntimeError, AssertionError, ValueError):
        return None
    return int(free), int(total)


def resident_fits(nbytes: int, device: torch.device, vram_max_usage: float) -> bool:
    """Whether a dataset of ``nbytes`` may be kept whole on ``device``."""
    if device.type == "cuda":
        info = cuda_memory(device)
        if info is None:  # a failed probe streams, as floDl (Rust) does
            return False
        free, total = info
        return nbytes < vram_max_usage * total - (total - free)
    if device.type == "cpu":
        avail = host_available_bytes()
        return avail is None or nbytes <= HOST_RESIDENT_FRACTION * avail
    return True  # other accelerators: try, and fall back to streaming on out-of-memory


def auto_prefetch_depth(
    device: torch.device, batch_bytes: int, vram_max_usage: float, num_batches: int
) -> int:
    """Batches to keep in flight: ``(total * clamp(max_usage, .5, .99) - used - reserve) / batch``.

    Capped at one epoch's batches (a queue that holds the epoch already performs as resident).
    Can be 0 when the device is full: batches are then loaded in the consumer, one at a time.
    """
    cap = max(num_batches, 1)
    if device.type != "cuda" or batch_bytes <= 0:
        return min(HOST_PREFETCH_DEPTH, cap)
    info = cuda_memory(device)
    if info is None:
        return min(HOST_PREFETCH_DEPTH, cap)
    free, total = info
    budget = total * min(max(vram_max_usage, 0.5), 0.99) - (total - free)
    budget -= ACTIVATION_RESERVE_FRACTION * total
    return max(0, min(math.floor(budget / batch_bytes), cap))
