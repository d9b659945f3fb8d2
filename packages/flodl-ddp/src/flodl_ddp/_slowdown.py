"""A testing aid: make one rank slower, to study heterogeneity on a uniform machine.

``slowdown={1: 2.0}`` makes rank 1 take twice as long per batch as it would alone: a stand-in
for an older device next to a newer one. It is meant for tests and benchmarks; on a real
heterogeneous rig the devices differ by themselves.

The rank *owes* the difference between ``factor`` times its *reference* batch time and what
each batch took, and pays the debt by sleeping, in one piece once it owes :data:`PAY_EVERY_S`,
and always before it does anything another rank can observe (:meth:`Slowdown.settle`: before it
says it is ready, claims work, averages or ends an epoch). At every such point its clock reads
what the slower device's would. Three choices here were measured on a 2-core VM, and each decides
whether the simulated device is the one asked for:

- **A reference time, not each batch's own.** A rank that sleeps wakes slower: on the VM its
  batches after a pause run on cold caches (a halted virtual CPU's core serves other work
  meanwhile). Next to a fast rank, a logistic-regression rank slowed 2x ran its batches at a
  median 0.60 ms where the same rank unslowed took 0.45 ms; owing ``factor - 1`` times *that*
  made "2.0" a 2.2-2.6x slower device (alone and next to a fast rank). So a batch owes
  ``factor x min(took, reference) - took``, the reference being the lower quartile of the
  rank's last :data:`REFERENCE_BATCHES` batches: a batch the pause made slower owes less, and
  the clock still reads ``factor x reference``.
  This assumes batches of one cost (fixed shapes); a batch longer than the reference is not
  slowed beyond ``factor x reference``.
- **Pieces, not a pause after every batch.** Each switch from pausing back to training starts
  on cold caches and branch predictors: a 0.7 ms MNIST step ran at 1.1 ms right after a pause,
  so ``2.0`` made a lone rank 3.1x slower, not 2x (2,000 batches); paying in 20 ms pieces it
  ran 1.95-2.0x.
- **Sleeping, not busy-waiting.** A slower device does not take cycles from the fast one, but a
  busy-waiting rank does on a VM whose cores share hardware: next to it, the fast rank's LeNet
  step took 9.8-11.7 ms against 8.7-10.4 ms next to a rank that sleeps the same pieces (its
  own step: 8.8-9.3 ms alone). Sleeping after *every* batch was worse still (the waking rank's
  own step slowed 40 %), which pieces avoid.
"""

from __future__ import annotations

import time
from collections import deque

import torch

PAY_EVERY_S = 0.02
"""A rank pays what it owes once that reaches this many seconds (or at the next settle point)."""

REFERENCE_BATCHES = 64
"""The reference batch time is the lower quartile of the rank's last this-many batches."""


class Slowdown:
    """Make this rank take ``factor`` times its reference batch time per batch.

    Args:
        factor: ``>= 1``; ``1.0`` is inactive.
        device: the rank's device (a CUDA rank synchronises it to time its batches).
        pay_every_s: pay the owed time in pieces of at least this many seconds (``0`` pays
            after every batch).
    """

    def __init__(
        self, factor: float, device: torch.device, pay_every_s: float = PAY_EVERY_S
    ) -> None:
        self.factor = float(factor)
        self._cuda = device.type == "cuda"
        self._device = device
        self.pay_every_s = float(pay_every_s)
        self.owed = 0.0
        self._recent: deque[float] = deque(maxlen=REFERENCE_BATCHES)

    @property
    def active(self) -> bool:
        return self.factor > 1.0

    def after_batch(self, started: float) -> float:
        """Owe ``factor x min(took, reference) - took`` for a batch that took ``took`` seconds
        (``time.perf_counter() - started``); pay once the debt reaches ``pay_every_s``. Returns
        the seconds paid now.

        On CUDA the device is synchronised first, so the measured time is the kernels' time and
        not the launch time.
        """
        if not self.active:
            return 0.0
        if self._cuda:
            torch.cuda.synchronize(self._device)
        took = max(0.0, time.perf_counter() - started)
        self._recent.append(took)
        self.owed += max(0.0, self.factor * min(took, self.reference()) - took)
        if self.owed < self.pay_every_s:
            return 0.0
        return self.settle()

    def reference(self) -> float:
        """The rank's reference batch time in seconds: the lower quartile of its recent batches
        (``0.0`` before the first)."""
        if not self._recent:
            return 0.0
        return sorted(self._recent)[len(self._recent) // 4]

    def settle(self) -> float:
        """Pay everything owed now, asleep; returns those seconds."""
        pause, self.owed = self.owed, 0.0  # never negative: batches add durations >= 0
        if pause > 0:
            time.sleep(pause)
        return pause
