"""Own slices plus the shared pool: every batch of an epoch is run exactly once."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from flodl_ddp._worklist import POOL_FRACTION, EpochWork, RankWork, guided_blocks


def _sizes(blocks: list[range]) -> list[int]:
    return [len(b) for b in blocks]


def test_guided_blocks_shrink_toward_one() -> None:
    assert _sizes(guided_blocks(0, 20, 2)) == [5, 4, 3, 2, 2, 1, 1, 1, 1]
    blocks = guided_blocks(7, 107, 3)
    assert blocks[0] == range(7, 24)  # ceil(100 / 6) = 17
    assert [i for b in blocks for i in b] == list(range(7, 107))
    assert guided_blocks(5, 5, 2) == []


def _covered(work: EpochWork) -> list[int]:
    return sorted(i for b in (*work.own, *work.pool) for i in b)


def test_plan_covers_the_epoch_once() -> None:
    work = EpochWork.plan(100, [2.0, 1.0], 2, pool_fraction=0.10)
    assert _covered(work) == list(range(100))
    # 90 own batches split 2:1, then the pool of ceil(100 * 0.10) = 10
    assert work.own == (range(0, 60), range(60, 90))
    assert sum(_sizes(list(work.pool))) == 10
    default = EpochWork.plan(100, [2.0, 1.0], 2)
    assert _covered(default) == list(range(100))
    assert sum(_sizes(list(default.pool))) == round(100 * POOL_FRACTION)


def test_unknown_speeds_make_the_whole_epoch_pool() -> None:
    work = EpochWork.plan(40, None, 2)
    assert _sizes(list(work.own)) == [0, 0]
    assert _covered(work) == list(range(40))
    # cut finer than calibrated pools (ceil(left / 16) instead of / 4): a slower rank must not
    # hold a block sized for an equal-speed peer while the others run out of work
    assert _sizes(list(work.pool))[:5] == [3, 3, 3, 2, 2]
    assert max(_sizes(list(work.pool))) == 3 < _sizes(guided_blocks(0, 40, 2))[0] == 10


def test_fewer_batches_than_ranks_are_all_pool() -> None:
    work = EpochWork.plan(2, [1.0, 1.0, 1.0], 3)
    assert _sizes(list(work.own)) == [0, 0, 0]
    assert _covered(work) == [0, 1]


class _Store:
    """The store's atomic counter, shared by the simulated ranks."""

    def __init__(self) -> None:
        self.n = 0

    def claim(self) -> int:
        self.n += 1
        return self.n - 1

    def peek(self) -> int:
        return self.n


def _ranks(work: EpochWork, world: int, store: _Store, opened: list[range]) -> list[RankWork]:
    def open_block(block: range) -> Iterator[int]:
        opened.append(block)
        return iter(block)

    return [RankWork(work, r, store.claim, store.peek, open_block) for r in range(world)]


@pytest.mark.parametrize("shares", [None, [3.0, 1.0, 1.0]])
def test_ranks_pulling_in_any_order_run_each_batch_once(shares: list[float] | None) -> None:
    work = EpochWork.plan(57, shares, 3)
    store = _Store()
    opened: list[range] = []
    ranks = _ranks(work, 3, store, opened)
    rng = random.Random(0)
    seen: list[list[int]] = [[], [], []]
    live = [0, 1, 2]
    while live:
        r = rng.choice(live)
        b = ranks[r].next()
        if b is None:
            assert not ranks[r].has_more()
            live.remove(r)
        else:
            seen[r].append(b)
    assert sorted(seen[0] + seen[1] + seen[2]) == list(range(57))
    # a rank's own slice comes first and in order
    for r in range(3):
        own = list(work.own[r])
        assert seen[r][: len(own)] == own
    assert store.n == len(work.pool) + 3  # every block claimed once, then one miss per rank


def test_has_more_before_and_after_the_pool_drains() -> None:
    work = EpochWork.plan(4, None, 2)  # pool blocks of 1, 1, 1, 1
    store = _Store()
    a, b = _ranks(work, 2, store, [])
    assert a.has_more() and b.has_more()
    assert not a.in_hand() and not a.drained()  # nothing claimed yet: more only in the pool
    assert a.left() == b.left() == 4
    assert [a.next(), a.next(), a.next()] == [0, 1, 2]
    assert b.has_more()
    assert not a.in_hand()  # each block was one batch, and it ran
    assert a.left() == 1
    assert b.next() == 3
    assert a.drained() and b.drained()  # every block claimed
    assert not a.has_more() or a.next() is None
    assert a.next() is None and b.next() is None
    assert not a.has_more() and not b.has_more()


def test_a_block_is_opened_once_and_closed_when_left() -> None:
    closed: list[range] = []

    class Closing:
        def __init__(self, block: range) -> None:
            self.block = block
            self.it = iter(block)

        def __iter__(self) -> Closing:
            return self

        def __next__(self) -> int:
            return next(self.it)

        def close(self) -> None:
            closed.append(self.block)

    work = EpochWork.plan(10, [1.0, 1.0], 2)
    store = _Store()
    opened: list[range] = []

    def open_block(block: range) -> Closing:
        opened.append(block)
        return Closing(block)

    rank = RankWork(work, 0, store.claim, store.peek, open_block)
    out = []
    while (x := rank.next()) is not None:
        out.append(x)
    assert out == list(work.own[0]) + [i for blk in work.pool for i in blk]
    assert opened == [work.own[0], *work.pool]
    assert closed == opened  # each left block was closed, the last one at exhaustion


def test_left_counts_the_batches_in_hand_and_the_unclaimed_pool() -> None:
    work = EpochWork.plan(20, [1.0, 1.0], 2)  # own 0-7 and 8-14, pool 15-16, 17, 18, 19
    store = _Store()
    a, _ = _ranks(work, 2, store, [])
    assert [len(b) for b in work.pool] == [2, 1, 1, 1]
    assert a.left() == 8 + 5  # its own slice, all of the pool
    for _ in range(8):
        a.next()
    assert a.left() == 5
    a.next()  # claims the first block (two batches) and runs one of them
    assert a.left() == 1 + 3
