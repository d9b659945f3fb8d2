"""Which batches each rank runs in a cadence or async epoch: own slices plus a shared pool.

A static split by measured throughput leaves the faster ranks idle at the end of every epoch
whenever the estimate is a few percent off, and before ElChe has measured anything (epoch 0) the
split is a guess. So an epoch's batches are cut in two:

- **own slices**: the first ``1 - POOL_FRACTION`` (75 %) of the epoch order, consecutive per-rank
  slices sized by the ranks' throughput shares (identical on every rank, no communication);
- **the pool**: the rest, cut into *guided* blocks (each ``ceil(left / (2 · world))`` batches,
  so they shrink toward one batch), handed out in order to whichever rank asks first through
  an atomic counter in the store. A rank that finishes its own slice takes pool blocks until
  none are left; the ranks then finish the epoch within about one batch of each other.

Before the ranks' speeds are known the whole epoch is pool, cut four times finer
(``ceil(left / (8 · world))``): guided blocks are sized for ranks of equal speed, and a rank k
times slower holding one keeps the others waiting up to (k - 1) blocks' time at the epoch's end
(measured on a 62-batch LeNet epoch with one rank 2x slower: the fast rank idled 156 ms of
600). Every claimed block is run to the end
(claims happen only when a batch is about to be run), so within an epoch every batch of the plan
is run exactly once: nothing is skipped, nothing is seen twice.

Batch ``i`` covers positions ``i · batch_size .. (i + 1) · batch_size - 1`` of the epoch order
(the order :class:`flodl_core.DataLoader` draws from the run's seed), so a block of batches is a
``shard_range`` of the loader.
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
"""Divisor of the guided block size, per rank, once the ranks' speeds are known."""
COLD_POOL_SPREAD = 8
"""The same while they are not: finer, so a slow rank cannot hold a block sized for a peer."""


def guided_blocks(start: int, stop: int, world_size: int, spread: int = POOL_SPREAD) -> list[range]:
    """Batches ``start..stop-1`` cut into blocks of ``ceil(left / (spread · world_size))``.

    Example: ``guided_blocks(0, 20, 2)`` → sizes ``5, 4, 3, 2, 2, 1, 1, 1, 1``.
    """
    out: list[range] = []
    at = start
    while at < stop:
        size = max(1, math.ceil((stop - at) / (spread * world_size)))
        out.append(range(at, at + size))
        at += size
    return out


@dataclass(frozen=True)
class EpochWork:
    """One epoch's batches: ``own[r]`` is rank ``r``'s slice of batch indices, ``pool`` the
    blocks claimed on demand, in claim order. Together they cover ``range(total)`` once."""

    total: int
    own: tuple[range, ...]
    pool: tuple[range, ...]

    @classmethod
    def plan(
        cls,
        total: int,
        shares: Sequence[float] | None,
        world_size: int,
        pool_fraction: float = POOL_FRACTION,
    ) -> EpochWork:
        """Plan ``total`` batches over ``world_size`` ranks.

        Args:
            total: batches in the epoch (>= 0).
            shares: per-rank throughput shares (any positive scale); ``None`` while the speeds
                are unknown, which makes the whole epoch pool.
            world_size: number of ranks.
            pool_fraction: share of the epoch left to the pool when ``shares`` are known.
        """
        if shares is None or total < world_size:
            own_total = 0
        else:
            own_total = total - math.ceil(total * pool_fraction)
        sizes = split_sizes(own_total, shares) if own_total > 0 else [0] * world_size
        own: list[range] = []
        at = 0
        for size in sizes:
            own.append(range(at, at + size))
            at += size
        spread = COLD_POOL_SPREAD if shares is None else POOL_SPREAD
        pool = guided_blocks(own_total, total, world_size, spread)
        return cls(total, tuple(own), tuple(pool))


class RankWork:
    """One rank's batches of an epoch, pulled one at a time.

    Args:
        work: the epoch's plan (identical on every rank).
        rank: this rank.
        claim: ``claim()`` returns the next unclaimed pool index (shared by every rank: the
            store's atomic counter minus one); ``peek()`` returns how many were claimed so far.
        peek: see ``claim``.
        open_block: ``open_block(batches)`` → an iterator over the batches of ``range`` of
            batch indices (e.g. a loader's ``shard_range(...).epoch(e)``).
    """

    def __init__(
        self,
        work: EpochWork,
        rank: int,
        claim: Callable[[], int],
        peek: Callable[[], int],
        open_block: Callable[[range], Iterator[Any]],
    ) -> None:
        self.work = work
        self._claim = claim
        self._peek = peek
        self._open = open_block
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
        self._close()
        if self.done:
            return False
        i = self._claim()
        if i >= len(self.work.pool):
            self.done = True
            return False
        self._block = self.work.pool[i]
        self.claimed.append(self._block)
        self._left = len(self._block)
        return True

    def has_more(self) -> bool:
        """Whether :meth:`next` may still return a batch (false negatives never happen; a
        ``True`` can turn out empty when another rank claims the last block first)."""
        if self.in_hand():
            return True
        return not self.done and not self.drained()

    def left(self) -> int:
        """Batches of the epoch not run yet that this rank may still get: those in hand and the
        pool's unclaimed ones (one counter read)."""
        at = self._peek()
        return self._left + sum(len(b) for b in self.work.pool[at:])

    def in_hand(self) -> bool:
        """Whether this rank holds batches not yet run (its own slice, or a claimed block)."""
        return self._left > 0

    def drained(self) -> bool:
        """Whether every pool block has been claimed (by any rank); one counter read."""
        return self._peek() >= len(self.work.pool)

    def _close(self) -> None:
        close = getattr(self._it, "close", None)
        if close is not None:
            close()
        self._it = None

    def close(self) -> None:
        """Stop the block in progress (a streamed epoch's prefetch)."""
        self._close()


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
