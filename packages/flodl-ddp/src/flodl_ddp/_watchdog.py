"""Telling a dead rank from a slow one: the ranks' beacons and the supervisor's watchdog.

Each spawned rank shares its batch count and phase (:class:`Beacon`). A rank that dies exits; one
stopped (SIGSTOP) or hung does not, so the :class:`Watchdog` judges every living rank dead when it
is **stopped** (state ``T`` in ``/proc/<pid>/stat``) for ``stop_s``, **computing** without
finishing a batch for ``hang_s``, or in **any other phase** unchanged for ``wait_s`` (longer: a
rank waiting for a slow peer is not hung). A dead rank goes to ``kill(rank, why, seconds)``: an
elastic run kills it (the survivors carry on); a static run fails, naming it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

STARTING, COMPUTING, WAITING, FINISHED = 0, 1, 2, 3


class Beacon:
    """A rank's side: ``progress`` and ``phase`` are shared arrays (``Array('q'/'b', world)``),
    or ``None`` for a rank nobody watches (in-process and torchrun ranks)."""

    def __init__(self, rank: int, progress: Any = None, phase: Any = None) -> None:
        self.rank, self.progress, self.phase = rank, progress, phase

    def set(self, phase: int) -> None:
        if self.phase is not None:
            self.phase[self.rank] = phase

    def batch(self) -> None:
        if self.progress is not None:
            self.phase[self.rank] = COMPUTING
            self.progress[self.rank] += 1


def process_stopped(pid: int | None) -> bool:
    """Whether process ``pid`` is stopped (Linux ``/proc``; ``False`` where it cannot tell)."""
    if pid is None:
        return False
    with contextlib.suppress(OSError, IndexError), open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] in ("T", "t")
    return False


class Watchdog:
    """Judges ranks from their shared ``progress`` and ``phase`` arrays by the module doc's
    ``hang_s``, ``stop_s`` and ``wait_s``; ``kill`` gets each verdict once (``seconds``: how long
    the rank was stopped or stalled); ``clock``: monotonic seconds (for tests)."""

    def __init__(
        self,
        progress: Any,
        phase: Any,
        hang_s: float,
        stop_s: float,
        wait_s: float,
        kill: Callable[[int, str, float], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.progress, self.phase, self.kill, self.clock = progress, phase, kill, clock
        self.hang_s, self.stop_s, self.wait_s = float(hang_s), float(stop_s), float(wait_s)
        n = len(progress)
        self._seen = [(-1, -1)] * n  # (progress, phase) last time it changed
        self._since = [clock()] * n
        self._stopped_since: list[float | None] = [None] * n
        self.verdicts: list[tuple[int, str, float]] = []

    def reset(self, rank: int) -> None:
        """Forget rank ``rank``'s history (it was restarted): it is starting until its new process
        says otherwise (its imports may outlast ``hang_s``; the dead one's phase is not judged)."""
        self._seen[rank], self._since[rank], self.phase[rank] = (-1, -1), self.clock(), STARTING
        self._stopped_since[rank] = None

    def check(self, alive: Callable[[int], bool], stopped: Callable[[int], bool]) -> list[int]:
        """Look at every living rank once (``stopped(r)``: whether the kernel has rank ``r``'s
        process stopped, see :func:`process_stopped`); returns the ranks judged dead."""
        now, dead = self.clock(), []
        for r in filter(alive, range(len(self._seen))):
            verdict = self._judge(r, now, stopped(r))
            if verdict is not None:
                self.kill(r, *verdict)
                self.verdicts.append((r, *verdict))
                self._since[r], self._stopped_since[r] = now, None  # one verdict per stall
                dead.append(r)
        return dead

    def _judge(self, r: int, now: float, stopped: bool) -> tuple[str, float] | None:
        since = self._stopped_since[r]
        if stopped:
            since = self._stopped_since[r] = now if since is None else since
            if now - since >= self.stop_s:
                return f"was stopped (SIGSTOP) for {now - since:.1f} s", now - since
        else:
            self._stopped_since[r] = None
        state = (int(self.progress[r]), int(self.phase[r]))
        if state != self._seen[r]:
            self._seen[r], self._since[r] = state, now
            return None
        stalled = now - self._since[r]
        if state[1] == COMPUTING and stalled >= self.hang_s:
            return f"finished no batch for {stalled:.1f} s while computing", stalled
        if state[1] in (STARTING, WAITING) and stalled >= self.wait_s:
            return f"made no progress for {stalled:.1f} s", stalled
        return None
