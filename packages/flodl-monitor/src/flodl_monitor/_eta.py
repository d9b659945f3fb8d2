"""The remaining-time estimate: a pure rule fed with times, so a fake clock tests it.

What happens before the first epoch (building the model, loading data, starting the dashboard)
and the first steps' warm-up (lazy initialisation, first kernel launches, optimizer state) are
not what an epoch costs. Dividing the wall time since the monitor started by the epochs done, as
floDl (Rust) does, puts all of it into every epoch still to run, so the first ETA of a short run
is several times the real remaining time. The rule here:

- from the second logged epoch on, an epoch costs the **steady-state** wall time per epoch: from
  the end of the first logged epoch to the end of the latest one, over the epochs in between
  (the wall time, so evaluation and checkpoints between ``log`` calls count, and epochs logged
  every few epochs are counted as such);
- at the first logged epoch, it costs the duration the caller measured for it (from the epoch's
  own start, so nothing before the training loop counts). When its steps were tracked
  (``Monitor.track``), its loop is counted at the mean step time of the loop's later half (at
  most what the loop took), which leaves the warm-up of the first steps out as well (time
  outside the loop is kept as measured); with no duration, the tracked steps alone give it;
- with neither, the wall time since the monitor started (the only measure left).
"""

from __future__ import annotations

from dataclasses import dataclass, field

_KEEP = 4096  # step end times kept for the first loop; beyond, every other one is dropped


@dataclass
class _Steps:
    """The first tracked loop of the first epoch: when it started and when its steps ended.

    ``ends[i]`` is the end of step ``(i + 1) * stride`` (1-based); the stride doubles whenever
    ``ends`` fills up, so a loop of any length costs at most :data:`_KEEP` floats.
    """

    start: float
    ends: list[float] = field(default_factory=list)
    stride: int = 1
    done: int = 0
    last_end: float = 0.0

    def ended(self, now: float) -> None:
        self.done += 1
        self.last_end = now
        if self.done % self.stride == 0:
            self.ends.append(now)
            if len(self.ends) >= _KEEP:
                self.ends = self.ends[1::2]
                self.stride *= 2

    def pace(self) -> tuple[float, float] | None:
        """``(the loop's time so far, mean step of its later half)`` once two steps ended.

        Warm-up is not only the first step (allocator growth, caches, thread pools settle over
        a few), so the steady pace is taken from the later half of the loop alone.
        """
        if self.done < 2:
            return None
        k = (self.done // 2) // self.stride  # the last recorded step in the first half
        half_end, half_steps = (self.ends[k - 1], k * self.stride) if k else (self.start, 0)
        steady = (self.last_end - half_end) / (self.done - half_steps)
        return self.last_end - self.start, steady


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
        if self._steps is not None and self._first is None:
            self._steps.ended(now)

    # ---- epoch level --------------------------------------------------------------------------

    def per_epoch(self, epoch: int, duration: float, now: float) -> float:
        """What one epoch costs, seen at the end of ``epoch`` (its ``duration`` as measured by the
        caller, 0 if unknown), at time ``now``."""
        if self._first is not None:
            first_epoch, first_wall = self._first
            if epoch > first_epoch:
                return (now - first_wall) / (epoch - first_epoch)
        pace = self._steps.pace() if self._steps is not None else None
        if pace is not None:
            assert self._steps is not None
            measured, steady = pace
            # The whole loop at the steady pace; never above what it took (warm-up only ever
            # slows the first steps: a slower later half is load, not the loop's cost).
            loop = min(steady * self._steps.done, measured)
            # What the epoch spent outside the loop (evaluation, flush) is kept as measured.
            return loop + max(duration - measured, 0.0)
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
