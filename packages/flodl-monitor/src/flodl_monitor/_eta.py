"""The remaining-time estimate: a pure rule fed with times, so a fake clock tests it.

What happens before the first epoch (building the model, loading data, starting the dashboard)
and the first step's warm-up (lazy initialisation, first kernel launches, optimizer state) are
not what an epoch costs. Dividing the wall time since the monitor started by the epochs done, as
floDl (Rust) does, puts all of it into every epoch still to run, so the first ETA of a short run
is several times the real remaining time. The rule here:

- from the second logged epoch on, an epoch costs the **steady-state** wall time per epoch: from
  the end of the first logged epoch to the end of the latest one, over the epochs in between
  (the wall time, so evaluation and checkpoints between ``log`` calls count, and epochs logged
  every few epochs are counted as such);
- at the first logged epoch, it costs the duration the caller measured for it (from the epoch's
  own start, so nothing before the training loop counts). When its steps were tracked
  (``Monitor.track``), the first step's time is replaced by the mean time of the steps after
  it, which leaves the warm-up out as well; with no duration, the tracked steps alone give it;
- with neither, the wall time since the monitor started (the only measure left).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Steps:
    """The first tracked loop of the first epoch: when it started, its first and last step."""

    start: float
    first_end: float | None = None
    last_end: float | None = None
    done: int = 0

    def per_step(self) -> tuple[float, float] | None:
        """``(first step, mean later step)`` in seconds, once two steps have ended."""
        if self.done < 2 or self.first_end is None or self.last_end is None:
            return None
        return self.first_end - self.start, (self.last_end - self.first_end) / (self.done - 1)


class EtaEstimator:
    """Seconds left in a run of ``total`` epochs. Times are any clock's seconds (monotonic)."""

    def __init__(self, total: int, start: float) -> None:
        self.total = total
        self._start = start
        self._first: tuple[int, float] | None = None  # (epoch, wall) of the first log
        self._steps: _Steps | None = None
        self._loops = 0  # tracked loops begun before the first log

    # ---- batch level (optional) ---------------------------------------------------------------

    def loop_started(self, now: float) -> bool:
        """A tracked loop begins at ``now``; ``True`` if its steps feed the estimate (only the
        first loop before the first log does: later ones, evaluation say, are not timed)."""
        if self._first is not None:
            return False
        self._loops += 1
        if self._loops > 1:
            return False
        self._steps = _Steps(start=now)
        return True

    def step_ended(self, now: float) -> None:
        """A step of the timed loop ended at ``now`` (its batch read, its work done)."""
        steps = self._steps
        if steps is None or self._first is not None:
            return
        steps.done += 1
        if steps.done == 1:
            steps.first_end = now
        steps.last_end = now

    # ---- epoch level --------------------------------------------------------------------------

    def per_epoch(self, epoch: int, duration: float, now: float) -> float:
        """What one epoch costs, seen at the end of ``epoch`` (its ``duration`` as measured by the
        caller, 0 if unknown), at time ``now``."""
        if self._first is not None:
            first_epoch, first_wall = self._first
            if epoch > first_epoch:
                return (now - first_wall) / (epoch - first_epoch)
        steps = self._steps.per_step() if self._steps is not None else None
        if steps is not None:
            first, later = steps
            assert self._steps is not None
            loop = later * self._steps.done  # the loop's steps at the steady pace
            if duration > 0:
                # The epoch as measured, with its first step at the pace of the others; never
                # below the loop itself (a duration that timed only part of the epoch).
                return max(duration - max(first - later, 0.0), loop)
            return loop
        if duration > 0:
            return duration
        return now - self._start

    def update(self, epoch: int, duration: float, now: float) -> float | None:
        """Record that ``epoch`` (0-based) ended at ``now`` after ``duration`` seconds; returns the
        seconds left (``None`` after the last epoch)."""
        cost = self.per_epoch(epoch, duration, now)
        if self._first is None:
            self._first = (epoch, now)
        if epoch >= self.total - 1:
            return None
        return max(cost, 0.0) * (self.total - epoch - 1)
