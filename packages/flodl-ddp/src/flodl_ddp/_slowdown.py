"""A testing aid: make one rank slower, to study heterogeneity on a uniform machine.

``slowdown={1: 2.0}`` stretches each batch of rank 1 to twice its measured duration: a stand-in
for an older device next to a newer one. It is meant for tests and benchmarks; on a real
heterogeneous rig the devices differ by themselves.

How the extra time is spent depends on what is simulated:

- **CUDA rank** (an older GPU): the host thread sleeps, as it would while a slower GPU works.
- **CPU rank** (an older processor): the rank busy-waits, as a slower processor stays busy for
  the whole batch. Sleeping instead lets the operating system idle that core, and on a small VM
  the waking rank then ran its own batches 20-40 % slower and slowed the *other* rank by up to
  ~15 % (cold caches, vCPU halt and wake-up): the simulated ratio would be ~2.5x, not 2x, and
  the fast rank would not be the fast rank alone any more.
"""

from __future__ import annotations

import hashlib
import time

import torch

_SPIN_BLOCK = bytes(16384)


class Slowdown:
    """Stretch each batch of this rank to ``factor`` times its measured duration."""

    def __init__(self, factor: float, device: torch.device) -> None:
        self.factor = float(factor)
        self._cuda = device.type == "cuda"
        self._device = device

    @property
    def active(self) -> bool:
        return self.factor > 1.0

    def after_batch(self, started: float) -> float:
        """Spend ``(factor - 1)`` times the batch's duration (``time.perf_counter() - started``)
        more; returns those seconds.

        On CUDA the device is synchronised first, so the measured time is the kernels' time and
        not the launch time, and the pause is a sleep. On CPU the pause busy-waits until its
        deadline (a preempted rank still ends on time: the deadline is wall-clock).
        """
        if not self.active:
            return 0.0
        if self._cuda:
            torch.cuda.synchronize(self._device)
        pause = (self.factor - 1.0) * max(0.0, time.perf_counter() - started)
        if pause <= 0:
            return 0.0
        if self._cuda:
            time.sleep(pause)
        else:
            deadline = time.perf_counter() + pause
            while time.perf_counter() < deadline:
                # ~10 µs of real work per turn that, unlike a bare Python loop, releases the GIL
                # (hashlib does for inputs over 2 KiB): a world of one trains on a thread of the
                # caller's process, whose other threads must keep running. time.sleep(0) would
                # release it too, but sleeps ~80 µs a call, which is idling again.
                hashlib.sha256(_SPIN_BLOCK)
        return pause
