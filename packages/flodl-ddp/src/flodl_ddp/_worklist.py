"""Which batches each rank runs in an epoch: own slices plus a shared pool (static worlds), or
the next batches after a committed cursor (elastic windows).

A static split by measured throughput leaves the faster ranks idle at the end of every epoch
whenever the estimate is a few percent off, and before ElChe has measured anything (epoch 0) the
split is a guess. So a static epoch's batches are cut in two (:class:`EpochWork`):

- **own slices**: the first ``1 - POOL_FRACTION`` (75 %) of the epoch order, consecutive per-rank
  slices sized by the ranks' throughput shares (identical on every rank, no communication);
- **the pool**: the rest, claimed a block at a time through an atomic counter of batches: a
  rank adds the size of its block and gets the batches before the new count.

How many batches a rank claims (:func:`claim_size`), with ``left`` unclaimed and its share
``s = mine / (mine + others)`` of the throughput (batches per second, ElChe's measurements):

- **guided**: ``ceil(left · s / POOL_SPREAD)``, so blocks shrink as the pool empties and a
  slow rank's blocks are as short in time as a fast rank's;
- **only if it helps**: at most ``floor(left · mine / others)`` batches: a block it would still be
  running when the others could have finished the whole pool is not claimed, and a rank for
  which that bound is 0 stops (the epoch's last batches go to the faster ranks). Without this,
  a rank 8x slower claiming a 7-batch block at the epoch's end kept its peer idle for a third
  of every epoch's wall time (``benchmarks/ddp_hetero.py``'s MLP);
- before the speeds are known (epoch 0's probe window): one batch at a time, so a rank of any
  speed holds at most one batch the others could have run (blocks of ``ceil(left / 16)`` were
  the rule once: next to a rank 16x slower the fast one idled a second of a 2.7 s epoch 0
  waiting for the slow rank's first block). It costs a counter add per batch until the first
  averaging round calibrates ElChe.

Every claimed block is run to the end (claims happen only when a batch is about to be run), so
within an epoch every batch of the plan is run exactly once. Batch ``i`` covers positions
``i · batch_size .. (i + 1) · batch_size - 1`` of the epoch order (the order
:class:`flodl_core.DataLoader` draws from the run's seed), so a block is a ``shard_range``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ._partition import split_sizes

POOL_FRACTION = 0.25
"""Share of a calibrated epoch's batches handed out on demand instead of split up front: it
absorbs a throughput estimate that is off by up to about this much (ranks sharing cores, thermal
throttling, data-dependent step times), for a few dozen store round trips per epoch."""
POOL_SPREAD = 2
"""Divisor of a rank's guided block once the ranks' speeds are known."""


def claim_size(left: int, world: int, speeds: Sequence[float] | None, rank: int) -> int:
    """How many of the pool's ``left`` batches rank ``rank`` claims next (module doc); 0: it
    claims no more. ``speeds``: every rank's batches per second, ``None`` while unknown."""
    if left <= 0:
        return 0
    if speeds is None:
        return 1
    mine = speeds[rank]
    others = sum(speeds) - mine
    if others <= 0:
        return max(1, math.ceil(left / POOL_SPREAD))
    guided = max(1, math.ceil(left * mine / (mine + others) / POOL_SPREAD))
    return min(guided, math.floor(left * mine / others))


@dataclass(frozen=True)
class EpochWork:
    """One epoch's batches: ``own[r]`` is rank ``r``'s slice of batch indices, ``pool`` the
    batches claimed on demand. Together they cover ``range(total)`` once."""

    total: int
    own: tuple[range, ...]
    pool: range

    @classmethod
    def plan(cls, total: int, shares: Sequence[float] | None, world_size: int,
             pool_fraction: float = POOL_FRACTION) -> EpochWork:  # fmt: skip
        """Plan ``total`` batches over ``world_size`` ranks; ``shares``: per-rank throughput
        shares (any positive scale), ``None`` while the speeds are unknown, which makes the
        whole epoch pool."""
        own_total = 0
        if shares is not None and total >= world_size:
            own_total = total - math.ceil(total * pool_fraction)
        sizes = split_sizes(own_total, shares) if own_total > 0 else [0] * world_size
        starts = [sum(sizes[:r]) for r in range(world_size)]
        own = tuple(range(s, s + n) for s, n in zip(starts, sizes, strict=True))
        return cls(total, own, range(own_total, total))


class RankWork:
    """One rank's batches of an epoch, pulled one at a time.

    Args:
        work: the epoch's plan (identical on every rank).
        rank: this rank.
        claim: ``claim(k)`` adds ``k`` to the pool's shared counter of claimed batches and
            returns the count before (the store's atomic add minus ``k``).
        peek: how many pool batches were claimed so far.
        size: ``size(left)``: how many batches to claim with ``left`` unclaimed
            (:func:`claim_size`).
        open_block: ``open_block(batches)`` → an iterator over the batches of ``range`` of
            batch indices (e.g. a loader's ``shard_range(...).epoch(e)``).
    """

    def __init__(self, work: EpochWork, rank: int, claim: Callable[[int], int],
                 peek: Callable[[], int], size: Callable[[int], int],
                 open_block: Callable[[range], Iterator[Any]]) -> None:  # fmt: skip
        self.work = work
        self._claim, self._peek, self._size, self._open = claim, peek, size, open_block
        self._block: range = work.own[rank]
        self._it: Iterator[Any] | None = None
        self._left = len(self._block)
        self.claimed: list[range] = []
        self.done = False

    def next(self) -> Any | None:
        """The next batch, or ``None`` when this rank has nothing left in the epoch."""
        while self._left == 0:
            if not self._next_block():
                return None
        if self._it is None:
            self._it = self._open(self._block)
        self._left -= 1
        return next(self._it)

    def _next_block(self) -> bool:
        self.close()
        pool = self.work.pool
        k = 0 if self.done else self._size(len(pool) - self._peek())
        if k <= 0:
            self.done = True
            return False
        start = self._claim(k)
        if start >= len(pool):
            self.done = True
            return False
        self._block = pool[start : start + k]  # a range clips at the pool's end
        self.claimed.append(self._block)
        self._left = len(self._block)
        return True

    def has_more(self) -> bool:
        """Whether :meth:`next` may still return a batch (false negatives never happen; a
        ``True`` can turn out empty when another rank claims the last batches first)."""
        return self.in_hand() or (not self.done and not self.drained())

    def left(self) -> int:
        """Batches of the epoch not run yet that this rank may still get: those in hand and the
        pool's unclaimed ones (one counter read)."""
        return self._left + max(0, len(self.work.pool) - self._peek())

    def in_hand(self) -> bool:
        """Whether this rank holds batches not yet run (its own slice, or a claimed block)."""
        return self._left > 0

    def drained(self) -> bool:
        """Whether every pool batch has been claimed (by any rank); one counter read."""
        return self._peek() >= len(self.work.pool)

    def close(self) -> None:
        """Stop the block in progress (a streamed epoch's prefetch)."""
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._it = None


class WindowWork:
    """One rank's batches of one elastic window: the next ``Σ counts`` batches of the epoch
    order after ``start`` (the committed cursor), cut into consecutive slices for the members
    in rank order. Nobody's share is tied to a rank that may die, so a dead rank's batches
    simply go to whoever is alive at the next window; a window that does not commit is planned
    again from the same cursor.

    Args:
        start: the epoch's committed cursor (batches done).
        total: batches in the epoch.
        counts: every rank's count for the window (0 for non-members; see ``ElChe.counts``),
            cut down proportionally when fewer batches are left.
        rank: this rank.
        open_block: as for :class:`RankWork`.
    """

    def __init__(
        self,
        start: int,
        total: int,
        counts: Sequence[int],
        rank: int,
        open_block: Callable[[range], Iterator[Any]],
    ) -> None:
        left = max(0, total - start)
        counts = list(counts)
        if sum(counts) > left:  # the epoch's tail: the same proportions, floored, then one by one
            want = sum(counts)
            cut = [c * left // want for c in counts]
            order = [r for r in range(len(counts)) if counts[r] > 0]
            for i in range(left - sum(cut)):
                cut[order[i % len(order)]] += 1
            counts = cut
        first = start + sum(counts[:rank])
        self.block = range(first, first + counts[rank])
        self.size = sum(counts)
        """Batches of the whole window (every member's)."""
        self._more = start + self.size < total
        self._open = open_block
        self._it: Iterator[Any] | None = None
        self._left = len(self.block)

    def next(self) -> Any | None:
        if self._left == 0:
            return None
        if self._it is None:
            self._it = self._open(self.block)
        self._left -= 1
        return next(self._it)

    def has_more(self) -> bool:
        """Whether the epoch has batches after this window."""
        return self._more

    def in_hand(self) -> bool:
        return self._left > 0

    def left(self) -> int:
        return self._left

    def close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._it = None
