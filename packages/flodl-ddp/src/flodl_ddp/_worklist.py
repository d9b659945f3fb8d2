"""Which batches each rank runs in an epoch: own slices plus a shared pool (static worlds), or
the next batches after a committed cursor (elastic windows).

A static epoch (:class:`EpochWork`) is cut in two: **own slices**, the first ``1 -
POOL_FRACTION`` of the epoch order in consecutive per-rank slices sized by throughput share (no
communication), and **the pool**, the rest, claimed a block at a time through an atomic counter
of batches. A rank's next block (:func:`claim_size`, ``left`` unclaimed, its throughput share
``s = mine / (mine + others)``) is ``ceil(left · s / POOL_SPREAD)`` (guided), at most
``floor(left · mine / others)`` (only if it helps; 0: it stops; the fastest rank never stops).
While the speeds are unknown (epoch 0) a rank goes by its *pace*: its own seconds per batch
and the batches per second the others took from the pool since its last claim, both read off
the counter and its clock. Its block holds at most ``COLD_BLOCK_S`` of its own work (one batch
at least; one batch before it has a pace) and at most ``ceil(left / (world · POOL_SPREAD))``; it
stops when the others would run more than ``max(left, 2 · (world - 1))`` batches during one of
its own (the fastest rank never does, so the pool always empties). Every claimed block is run
to its end, so every batch of the plan runs once. Batch ``i`` covers positions
``i · batch_size .. (i + 1) · batch_size - 1`` of the epoch order, so a block is a
``shard_range``. Why, with measurements: ARCHITECTURE-NOTES.md, ``_worklist``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._partition import split_sizes

POOL_FRACTION = 0.25
"""Share of a calibrated epoch's batches handed out on demand instead of split up front."""
POOL_SPREAD = 2
"""Divisor of a rank's guided block once the ranks' speeds are known."""
COLD_BLOCK_S = 0.04
"""Before the speeds are known, the most of its own time a rank's pool block holds (seconds)."""


def claim_size(
    left: int,
    world: int,
    speeds: Sequence[float] | None,
    rank: int,
    pace: tuple[float, float] | None = None,
) -> int:
    """How many of the pool's ``left`` batches rank ``rank`` claims next (module doc); 0: it
    claims no more. ``speeds``: every rank's batches per second, ``None`` while unknown;
    ``pace``: ``(seconds per batch of this rank, the others' batches per second)``, the rule
    while the speeds are unknown (``None``: one batch)."""
    if left <= 0:
        return 0
    if speeds is None:
        if pace is None or pace[0] <= 0:
            return 1
        mine_s, others = pace
        if others * mine_s > max(left, 2 * (world - 1)):
            return 0
        return max(1, min(int(COLD_BLOCK_S / mine_s), math.ceil(left / (world * POOL_SPREAD))))
    mine = speeds[rank]
    others = sum(speeds) - mine
    if others <= 0:
        return max(1, math.ceil(left / POOL_SPREAD))
    guided = max(1, math.ceil(left * mine / (mine + others) / POOL_SPREAD))
    floor = math.floor(left * mine / others)
    return min(guided, max(floor, 1 if mine >= max(speeds) else 0))


@dataclass(frozen=True)
class EpochWork:
    """One epoch's batches: ``own[r]`` is rank ``r``'s slice of batch indices, ``pool`` the
    batches claimed on demand. Together they cover ``range(total)`` once."""

    total: int
    own: tuple[range, ...]
    pool: range

    @classmethod
    def plan(
        cls,
        total: int,
        shares: Sequence[float] | None,
        world_size: int,
        pool_fraction: float = POOL_FRACTION,
    ) -> EpochWork:
        """Plan ``total`` batches over ``world_size`` ranks by per-rank throughput ``shares`` (any
        positive scale; ``None`` while unknown: the whole epoch is pool)."""
        own_total = 0
        if shares is not None and total >= world_size:
            own_total = total - math.ceil(total * pool_fraction)
        sizes = split_sizes(own_total, shares) if own_total > 0 else [0] * world_size
        starts = [sum(sizes[:r]) for r in range(world_size)]
        own = tuple(range(s, s + n) for s, n in zip(starts, sizes, strict=True))
        return cls(total, own, range(own_total, total))


Opener = Callable[[range], Iterator[Any]]
"""``open_block(batches)``: an iterator over the batches of a ``range`` of batch indices."""


def cut_to(counts: Sequence[int], most: int) -> list[int]:
    """``counts`` scaled down to sum to at most ``most``: floors of the proportional share, then
    the remainder one by one to the nonzero counts, those whose floor is 0 first (so each keeps
    at least 1 while ``most`` allows: a rank with 0 would never run the batches it holds; a zero
    count stays 0).

    Example: ``[20, 10]``, ``most=16`` → floors ``[10, 5]`` (15) → ``[11, 5]``; ``[30, 10]``,
    ``most=2`` → floors ``[1, 0]`` → ``[1, 1]``."""
    total = sum(counts)
    if total <= most:
        return list(counts)
    out = [c * most // total for c in counts]
    ranks = sorted((r for r, c in enumerate(counts) if c > 0), key=lambda r: out[r] > 0)
    for i in range(most - sum(out)):
        out[ranks[i % len(ranks)]] += 1
    return out


class _Batches:
    """Batches of one block of indices at a time, opened on first use."""

    def __init__(self, block: range, open_block: Opener) -> None:
        self._block, self._open = block, open_block
        self._it: Iterator[Any] | None = None
        self._left = len(block)

    def _take(self) -> Any:
        if self._it is None:
            self._it = self._open(self._block)
        self._left -= 1
        return next(self._it)

    def in_hand(self) -> bool:
        """Whether this rank holds batches not yet run (its own slice, or a claimed block)."""
        return self._left > 0

    def close(self) -> None:
        """Stop the block in progress (a streamed epoch's prefetch)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._it = None


class RankWork(_Batches):
    """One rank's batches of an epoch, pulled one at a time.

    Args:
        work: the epoch's plan (identical on every rank); ``rank``: this rank.
        claim: ``claim(k)`` adds ``k`` to the pool's shared counter of claimed batches and
            returns the count before; ``peek()``: the count so far.
        size: ``size(left, pace)``: how many to claim with ``left`` unclaimed, ``pace`` as
            :func:`claim_size` takes it (``None`` before this rank's first claimed block).
        open_block: an :data:`Opener` (e.g. over a loader's ``shard_range(...).epoch(e)``).
        clock: seconds, for the pace.
    """

    def __init__(
        self,
        work: EpochWork,
        rank: int,
        claim: Callable[[int], int],
        peek: Callable[[], int],
        size: Callable[[int, tuple[float, float] | None], int],
        open_block: Opener,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(work.own[rank], open_block)
        self.work, self._claim, self._peek, self._size, self._clock = work, claim, peek, size, clock
        self._last: tuple[float, int, int] | None = None  # (when, pool count, block) at a claim
        self.done = False

    def next(self) -> Any | None:
        """The next batch, or ``None`` when this rank has nothing left in the epoch."""
        while self._left == 0:
            if not self._next_block():
                return None
        return self._take()

    def _next_block(self) -> bool:
        self.close()
        pool = self.work.pool
        if self.done:
            return False
        claimed, t = self._peek(), self._clock()
        k = self._size(len(pool) - claimed, self._pace(t, claimed))
        start = self._claim(k) if k > 0 else len(pool)
        if start >= len(pool):
            self.done = True
            return False
        self._block = pool[start : start + k]  # a range clips at the pool's end
        self._left = len(self._block)
        self._last = (t, start + k, len(self._block))
        return True

    def _pace(self, t: float, claimed: int) -> tuple[float, float] | None:
        """Since this rank's last claim: its seconds per batch (it ran that whole block) and the
        batches per second the others claimed."""
        if self._last is None or t <= self._last[0]:
            return None
        was, count, block = self._last
        return (t - was) / block, max(0, claimed - count) / (t - was)

    def has_more(self) -> bool:
        """Whether :meth:`next` may still return a batch (false negatives never happen; a
        ``True`` can turn out empty when another rank claims the last batches first)."""
        return self.in_hand() or (not self.done and not self.drained())

    def left(self) -> int:
        """Batches of the epoch not run yet that this rank may still get: those in hand and the
        pool's unclaimed ones (one counter read)."""
        return self._left + max(0, len(self.work.pool) - self._peek())

    def drained(self) -> bool:
        """Whether every pool batch has been claimed (by any rank); one counter read."""
        return self._peek() >= len(self.work.pool)


class WindowWork(_Batches):
    """One rank's batches of one elastic window: the next ``Σ counts`` batches of the ``total``
    of the epoch after ``start`` (the committed cursor), in consecutive slices for the members in
    rank order, so a dead rank's share simply goes to the living at the next window.
    ``counts``: every rank's count (0 for non-members), cut down (:func:`cut_to`) when fewer
    batches are left; ``open_block``: an :data:`Opener`."""

    def __init__(
        self, start: int, total: int, counts: Sequence[int], rank: int, open_block: Opener
    ) -> None:
        counts = cut_to(counts, max(0, total - start))
        first = start + sum(counts[:rank])
        self.block = range(first, first + counts[rank])
        super().__init__(self.block, open_block)
        self.size = sum(counts)
        """Batches of the whole window (every member's)."""
        self._more = start + self.size < total

    def next(self) -> Any | None:
        return self._take() if self._left else None

    def has_more(self) -> bool:
        """Whether the epoch has batches after this window."""
        return self._more

    def left(self) -> int:
        return self._left
