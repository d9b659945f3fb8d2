"""The watchdog of an elastic run: kill a rank whose training stops advancing.

A rank that dies is noticed by the lighthouse (no heartbeat). A rank *hung* in Python (a
deadlock in a data pipeline, an endless loop in ``train_step``) keeps heartbeating from
torchft's background thread, so the quorum keeps waiting for it; with two ranks the survivor
times out and fails. The watchdog closes that gap: each rank counts its batches and says
whether it is computing or waiting for its peers (shared memory, read here without touching the
rank); a rank that sits in the *computing* phase for ``hang_timeout`` seconds without finishing a
batch is killed (SIGKILL), which turns the hang into an ordinary death the survivors handle.

Waiting phases (quorum, averaging, healing) are not judged: a rank waiting for a hung peer is
not hung itself, and torchft bounds those waits with its own timeouts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

COMPUTING = 1  # the phase code of _elastic_rank.COMPUTING (kept here to stay import-light)


class Watchdog:
    """Judges ranks from their shared ``progress`` and ``phase`` arrays.

    Args:
        progress: per-rank batch counters (a shared ``Array('q', world)``).
        phase: per-rank phase codes (a shared ``Array('b', world)``).
        hang_timeout: seconds without a finished batch while computing before a kill.
        kill: ``kill(rank, stalled_s)``; called once per stall.
        clock: monotonic seconds (for tests).
    """

    def __init__(
        self,
        progress: Any,
        phase: Any,
        hang_timeout: float,
        kill: Callable[[int, float], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.progress = progress
        self.phase = phase
        self.hang_timeout = float(hang_timeout)
        self.kill = kill
        self.clock = clock
        n = len(progress)
        self._seen = [(-1, -1)] * n  # (progress, phase) last time it changed
        self._since = [clock()] * n
        self.kills: list[tuple[int, float]] = []

    def reset(self, rank: int) -> None:
        """Forget rank ``rank``'s history (it was restarted)."""
        self._seen[rank] = (-1, -1)
        self._since[rank] = self.clock()

    def check(self, alive: Callable[[int], bool]) -> list[int]:
        """Look at every living rank once; returns the ranks killed by this call."""
        now = self.clock()
        killed = []
        for r in range(len(self._seen)):
            if not alive(r):
                continue
            state = (int(self.progress[r]), int(self.phase[r]))
            if state != self._seen[r]:
                self._seen[r] = state
                self._since[r] = now
                continue
            stalled = now - self._since[r]
            if state[1] == COMPUTING and stalled >= self.hang_timeout:
                self.kill(r, stalled)
                self.kills.append((r, stalled))
                self._since[r] = now  # one kill per stall
                killed.append(r)
        return killed
