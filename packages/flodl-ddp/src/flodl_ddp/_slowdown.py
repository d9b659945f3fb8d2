"""A testing aid: make one rank slower, to study heterogeneity on a uniform machine.

``slowdown={1: 2.0}`` makes rank 1 sleep after each batch for as long as the batch took, so each
of its batches takes twice as long: a stand-in for an older GPU next to a newer one. It is meant
for tests and benchmarks; on a real heterogeneous rig the devices differ by themselves.
"""

from __future__ import annotations

import time

import torch


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
        """Sleep ``(factor - 1)`` times the batch's duration (``time.perf_counter() - started``);
        returns the seconds slept.

        On CUDA the device is synchronised first so the measured time is the kernels' time, not
        the launch time.
        """
        if not self.active:
            return 0.0
        if self._cuda:
            torch.cuda.synchronize(self._device)
        pause = (self.factor - 1.0) * max(0.0, time.perf_counter() - started)
        if pause > 0:
            time.sleep(pause)
        return pause
