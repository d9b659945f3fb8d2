"""A testing aid: make one rank slower, to study heterogeneity on a uniform machine.

``slowdown={1: 2.0}`` makes rank 1 take twice as long per batch (an older device's stand-in). A
batch owes ``factor x min(took, reference) - took`` (reference: the lower quartile of recent batch
times), paid asleep once it reaches :data:`PAY_EVERY_S` and before anything another rank can observe
(:meth:`Slowdown.settle`). Measured: ARCHITECTURE-NOTES.md, ``_slowdown``.
"""

from __future__ import annotations

import time
from collections import deque

import torch

PAY_EVERY_S = 0.02  # a rank pays what it owes once that reaches this many seconds
REFERENCE_BATCHES = 64  # the reference is the lower quartile of this many last batch times


class Slowdown:
    """Make this rank take ``factor`` (``>= 1``; ``1.0`` is inactive) times its reference batch
    time per batch. ``device``: the rank's (on CUDA synchronised to time its batches);
    ``pay_every_s``: pay what is owed in pieces of at least this many seconds (``0``: per batch)."""

    def __init__(
        self, factor: float, device: torch.device, pay_every_s: float = PAY_EVERY_S
    ) -> None:
        self.factor, self._device, self.pay_every_s = float(factor), device, float(pay_every_s)
        self.owed = 0.0
        self._recent: deque[float] = deque(maxlen=REFERENCE_BATCHES)

    @property
    def active(self) -> bool:
        return self.factor > 1.0

    def after_batch(self, started: float) -> float:
        """Owe ``factor x min(took, reference) - took`` for a batch that took ``took`` seconds
        (``time.perf_counter() - started``; on CUDA after a synchronise, so the kernels' time);
        pay once the debt reaches ``pay_every_s``. Returns the seconds paid now."""
        if not self.active:
            return 0.0
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        took = max(0.0, time.perf_counter() - started)
        self._recent.append(took)
        self.owed += max(0.0, self.factor * min(took, self.reference()) - took)
        return self.settle() if self.owed >= self.pay_every_s else 0.0

    def reference(self) -> float:
        """The rank's reference batch time in seconds: the lower quartile of its recent batches
        (``0.0`` before the first)."""
        return sorted(self._recent)[len(self._recent) // 4] if self._recent else 0.0

    def settle(self) -> float:
        """Pay everything owed now, asleep; returns those seconds."""
        pause, self.owed = self.owed, 0.0  # never negative: batches add durations >= 0
        if pause > 0:
            time.sleep(pause)
        return pause
