"""When a cadence or async rank that has run its window's count stops and goes to the round.

- :func:`waiting`: async ranks wait, up to the overshoot; cadence ranks wait in their probe
  windows (before ElChe measured anything), up to :data:`PROBE_REACH` times their count, and so
  does async's automatic overshoot. Once calibrated, a cadence rank faster than the slow cohort
  fills its window: it waits, up to one more count, and the slow cohort says "ready" at its
  count and stops, so a slow rank running late costs the fast one no idle time. Without shared
  counters (elastic runs) nobody waits.
- :class:`Overshoot`: the automatic ``max_overshoot`` starts at
  ``min(5, max(2, batches_per_epoch // 100))``, grows by one after each round the guard calls
  stable, up to the anchor, and falls back to its start value when the guard reports divergence.
- A rank that does not wait stops at its count. A rank that waits says "ready" through a store
  counter once it has run its count, then trains on until every rank is ready, or it ran
  ``limit`` extra batches, or it leads by ``max_batch_diff`` (*throttled*).
- Either way, a rank at its count that finds the epoch nearly done runs the rest instead of
  stopping (:func:`finish_at`): every rank when the window's counts reach the epoch's end (the
  pool's claims decide; not under a ``max_batch_diff``), else a tail of :data:`TAIL_FRACTION` of
  the window, not run by a slow-cohort rank beside a faster one (who would wait for its slow
  batches), nor by a faster one beyond ``(F + 1)(F + 2) / 2`` batches beside ranks ``F`` times
  slower (they would idle through it; a next window shares it out).
- :func:`with_tail`: a static window that would leave at most half of itself in the epoch takes
  those batches in its counts, grown in proportion (the slow cohort's share too, else the faster
  ranks run them all while the slow ones wait at the round).
- A waiting rank whose "ready" completed the set, if it outpaces the slow cohort, keeps
  training until every other rank has stopped.

Why, with measurements: ARCHITECTURE-NOTES.md, ``_gate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ._comm import Comm
from ._partition import split_sizes

PROBE_REACH = 32
"""In a probe window a rank that ran its count trains at most this many counts more."""
TAIL_FRACTION = 0.25
"""At its count a rank runs the epoch's rest when it is at most this share of its window."""


class Pace(NamedTuple):
    """Where a rank stands by ElChe's calibration: whether it outpaces the slow cohort, and
    whether any member does (no member does when the ranks are equal)."""

    outpaces: bool = False
    anyone_outpaces: bool = False


def gate_keys(window: int) -> tuple[str, str]:
    """The store keys of window ``window``: ranks ready, ranks stopped."""
    return f"rdy{window}", f"stp{window}"


class WindowGate:
    """One rank's end of one window (see the module doc).

    Args:
        comm: the counters shared by the ranks; ``world``: the number of ranks.
        window: the window's number (its store keys, :func:`gate_keys`).
        mine: this rank's batch count for the window.
        waits: whether it keeps training past ``mine`` until every rank is ready, for at most
            ``limit`` batches past ``mine``, throttled at ``max_batch_diff`` (``None``: no cap).
        fill_late: async, and this rank outpaces the slow cohort (module doc).
        settle: pays the slowdown's debt before saying "ready" (the others see its clock).
        finish: whether the epoch's remaining batches are few enough to run in this window
            (asked once the rank has run ``mine``); ``None``: never.
    """

    def __init__(
        self,
        comm: Comm,
        world: int,
        window: int,
        mine: int,
        *,
        waits: bool,
        limit: int,
        max_batch_diff: int | None,
        fill_late: bool,
        settle: Callable[[], None],
        finish: Callable[[], bool] | None = None,
    ) -> None:
        self._comm, self._world, self._mine = comm, world, mine
        self._ready_key, self._stopped_key = gate_keys(window)
        self._waits, self._limit, self._max_diff = waits, limit, max_batch_diff
        self._fill_late, self._settle, self._finish = fill_late, settle, finish
        self._finishing = self._marked = self._completed_ready = False
        self.throttled = False
        """Whether the rank stopped because it led by ``max_batch_diff``."""

    def keep_going(self, done: int) -> bool:
        """Whether a rank that has run ``done`` batches of this window runs another."""
        if done < self._mine or self._finishing:
            return True
        if self._finish is not None and self._finish():
            self._finishing = True  # what is left only shrinks: no need to ask again
            return True
        if not self._waits:
            return False
        if not self._marked:
            self._settle()  # saying "ready" shows this rank's clock; polling does not
        n_ready = self._comm.counter(self._ready_key, 0 if self._marked else 1)
        self._completed_ready |= not self._marked and n_ready >= self._world
        self._marked = True
        extra = done - self._mine
        if extra >= self._limit or (n_ready >= self._world and not self._fills_the_wait()):
            return False
        if self._max_diff is not None and extra >= self._max_diff:
            self.throttled = True
            return False
        return True

    def _fills_the_wait(self) -> bool:
        fills = self._fill_late and self._completed_ready
        return fills and self._comm.counter(self._stopped_key, 0) < self._world - 1

    def stop(self) -> None:
        """After the window's last batch, a waiting rank says "ready" if it has not (its data
        ran out first), and that it has stopped (for a rank that may be filling the wait)."""
        if self._waits:
            if not self._marked:
                self._comm.counter(self._ready_key, 1)
            self._comm.counter(self._stopped_key, 1)


def waiting(
    async_: bool, calibrated: bool, overshoot: Overshoot, mine: int, pace: Pace
) -> tuple[bool, int]:
    """Whether a rank that ran its ``mine`` batches says "ready" and keeps training until every
    rank is, and for how many extra batches at most (module doc)."""
    if not calibrated and (not async_ or overshoot.fixed is None):
        return True, PROBE_REACH * mine
    if not async_:  # the slow cohort says "ready" (limit 0) so the faster ones stop filling
        return pace.anyone_outpaces, mine if pace.outpaces else 0
    return True, overshoot.current


def with_tail(counts: Sequence[int], left: int) -> list[int]:
    """The counts of a window, grown to the epoch's ``left`` batches when it would leave at most
    half of itself (module doc)."""
    total = sum(counts)
    return split_sizes(left, counts) if 0 < total < left <= total + total // 2 else list(counts)


def finish_at(counts: Sequence[int], mine: int, left: int, pace: Pace, capped: bool) -> int | None:
    """At most how many batches may be left for a rank at its count ``mine`` to run them all
    (``None``: never), ``counts`` planned with ``left`` batches left in the epoch (module doc);
    ``capped``: a ``max_batch_diff`` holds the ranks within it, so only a tail is run on."""
    if (total := sum(counts)) >= left and not capped:
        return left
    tail, f = int(total * TAIL_FRACTION), mine / min((c for c in counts if c > 0), default=1)
    # in fast batches: sharing a tail of L saves L/(F+1), costs a round and half a slow batch
    alone = min(tail, int((f + 1) * (f + 2) / 2))
    return alone if pace.outpaces else None if pace.anyone_outpaces else tail


def auto_overshoot(batches_per_epoch: int) -> int:
    """The automatic start value of ``max_overshoot`` (module doc)."""
    return min(5, max(2, batches_per_epoch // 100))


class Overshoot:
    """The async policy's allowance of extra batches (fixed, or automatic)."""

    def __init__(self, fixed: int | None, batches_per_epoch: int) -> None:
        self.fixed = fixed
        self.start = auto_overshoot(batches_per_epoch) if fixed is None else fixed
        self.current = self.start

    def after_round(self, stable: bool, anchor: int) -> None:
        """Grow by one after a stable round (up to ``anchor``), reset after a divergent one."""
        if self.fixed is None:
            self.current = min(self.current + 1, max(self.start, anchor)) if stable else self.start

    def state_dict(self) -> dict[str, int]:
        return {"current": self.current, "start": self.start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current, self.start = int(state["current"]), int(state["start"])
