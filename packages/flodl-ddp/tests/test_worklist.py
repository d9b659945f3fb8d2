"""Own slices plus the shared pool: every batch of an epoch is run exactly once, and a slow rank
claims only what it can finish before the faster ones would."""

from __future__ import annotations

import random
from collections.abc import Iterator
from functools import partial

import pytest

from flodl_ddp._worklist import POOL_FRACTION, EpochWork, RankWork, WindowWork, claim_size


def test_plan_covers_the_epoch_once() -> None:
    work = EpochWork.plan(100, [2.0, 1.0], 2, pool_fraction=0.10)
    # 90 own batches split 2:1, then the pool of ceil(100 * 0.10) = 10
    assert work.own == (range(0, 60), range(60, 90))
    assert work.pool == range(90, 100)
    default = EpochWork.plan(100, [2.0, 1.0], 2)
    assert len(default.pool) == round(100 * POOL_FRACTION)
    assert sorted(i for b in (*default.own, default.pool) for i in b) == list(range(100))


def test_unknown_speeds_make_the_whole_epoch_pool() -> None:
    work = EpochWork.plan(40, None, 2)
    assert [len(o) for o in work.own] == [0, 0] and work.pool == range(40)


def test_fewer_batches_than_ranks_are_all_pool() -> None:
    work = EpochWork.plan(2, [1.0, 1.0, 1.0], 3)
    assert [len(o) for o in work.own] == [0, 0, 0] and work.pool == range(2)


@pytest.mark.parametrize(
    ("left", "speeds", "rank", "want"),
    [
        (40, None, 0, 1),  # speeds unknown: one batch at a time
        (40, [1.0, 1.0], 0, 10),  # equal ranks: ceil(40 * 0.5 / 2)
        (40, [8.0, 1.0], 0, 18),  # the fast rank: ceil(40 * 8/9 / 2)
        (40, [8.0, 1.0], 1, 3),  # the slow rank: ceil(40 * 1/9 / 2)
        (20, [8.0, 1.0], 1, 2),  # guided: ceil(20 / 9 / 2) = 2, and 2 <= floor(20 / 8)
        (15, [8.0, 1.0], 1, 1),  # only if it helps: floor(15 / 8) = 1
        (7, [8.0, 1.0], 1, 0),  # the fast rank would finish all 7 before one slow batch
        (1, [1.0, 1.0], 0, 1),  # equal ranks: the last batch is still taken
        (1, [8.0, 1.0], 0, 1),
        (5, [3.0], 0, 3),  # alone: guided, ceil(5 / 2)
        (0, [1.0, 1.0], 0, 0),
        (30, [8.0, 0.0], 1, 0),  # a benched rank (speed 0) takes nothing
        (1, [1.0, 1.0, 1.0], 2, 1),  # three equal ranks: floor(1 / 2) = 0, but a fastest one
    ],
)
def test_claim_size(left: int, speeds: list[float] | None, rank: int, want: int) -> None:
    assert claim_size(left, len(speeds or [0, 0]), speeds, rank) == want


@pytest.mark.parametrize(
    ("left", "world", "pace", "want"),
    [
        (40, 2, None, 1),  # no pace yet: one batch
        (240, 2, (0.0065, 10.0), 6),  # a fast rank: 0.04 s of its own batches, int(0.04 / 0.0065)
        (10, 2, (0.0065, 10.0), 3),  # ... at most ceil(10 / (2 * 2))
        (40, 2, (0.104, 150.0), 1),  # a slow rank: one batch, its own is over COLD_BLOCK_S
        (10, 2, (0.104, 150.0), 0),  # the others run 15.6 batches during one of its: it stops
        (1, 2, (0.0065, 154.0), 1),  # equal ranks: the last batch is still taken
        (3, 3, (0.0065, 308.0), 1),  # three equal ranks: 2 batches of the others per own
        (0, 2, (0.0065, 10.0), 0),
    ],
)
def test_claim_size_before_the_speeds_are_known(
    left: int, world: int, pace: tuple[float, float] | None, want: int
) -> None:
    assert claim_size(left, world, None, 0, pace) == want


class _Store:
    """The store's atomic counter of claimed batches, shared by the simulated ranks."""

    def __init__(self) -> None:
        self.n = 0

    def claim(self, k: int) -> int:
        self.n += k
        return self.n - k

    def peek(self) -> int:
        return self.n


def _ranks(work: EpochWork, speeds: list[float] | None, store: _Store,
           opened: list[range]) -> list[RankWork]:  # fmt: skip
    def open_block(block: range) -> Iterator[int]:
        opened.append(block)
        return iter(block)

    def size(r: int) -> object:
        return lambda left, pace: claim_size(left, len(work.own), speeds, r, pace)

    return [
        RankWork(work, r, store.claim, store.peek, size(r), open_block)  # type: ignore[arg-type]
        for r in range(len(work.own))
    ]


@pytest.mark.parametrize("speeds", [None, [3.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
def test_ranks_pulling_in_any_order_run_each_batch_once(speeds: list[float] | None) -> None:
    work = EpochWork.plan(57, speeds, 3)
    store = _Store()
    ranks = _ranks(work, speeds, store, [])
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
    for r in range(3):  # a rank's own slice comes first and in order
        own = list(work.own[r])
        assert seen[r][: len(own)] == own
    assert store.n >= len(work.pool)


def test_a_slow_rank_stops_claiming_before_the_epoch_end() -> None:
    """Rank 1, 8x slower, pulls one batch for each 8 of rank 0's (a simulated clock): it never
    holds a batch when rank 0 runs out, so rank 0 never waits for it."""
    speeds = [8.0, 1.0]
    work = EpochWork.plan(100, None, 2)  # all pool
    store = _Store()
    fast, slow = _ranks(work, speeds, store, [])
    ran = [0, 0]
    tick = 0
    while True:
        tick += 1
        if fast.next() is None:
            break
        ran[0] += 1
        if tick % 8 == 0 and slow.next() is not None:
            ran[1] += 1
    assert not slow.in_hand()  # nothing left in its hand when the fast rank finished
    assert ran[0] + ran[1] + slow.left() == 100 and 5 <= ran[1] <= 12, ran


def test_has_more_before_and_after_the_pool_drains() -> None:
    work = EpochWork.plan(4, None, 2)
    store = _Store()
    a, b = _ranks(work, None, store, [])
    assert a.has_more() and b.has_more()
    assert not a.in_hand() and not a.drained()  # nothing claimed yet: more only in the pool
    assert a.left() == b.left() == 4
    assert [a.next(), a.next(), a.next()] == [0, 1, 2]  # one batch per claim: speeds unknown
    assert b.has_more() and not a.in_hand() and a.left() == 1
    assert b.next() == 3
    assert a.drained() and b.drained()
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

    rank = RankWork(work, 0, store.claim, store.peek, lambda left, pace: 2, open_block)
    out = []
    while (x := rank.next()) is not None:
        out.append(x)
    assert out == list(work.own[0]) + list(work.pool)
    assert opened == [work.own[0], *[work.pool[i : i + 2] for i in range(0, len(work.pool), 2)]]
    assert closed == opened  # each left block was closed, the last one at exhaustion


def test_left_counts_the_batches_in_hand_and_the_unclaimed_pool() -> None:
    work = EpochWork.plan(20, [1.0, 1.0], 2)  # own 0-7 and 8-14, pool 15-19
    store = _Store()
    a = RankWork(work, 0, store.claim, store.peek, lambda left, pace: 2, iter)
    assert a.left() == 8 + 5  # its own slice, all of the pool
    for _ in range(8):
        a.next()
    assert a.left() == 5
    a.next()  # claims two batches and runs one of them
    assert a.left() == 1 + 3


def test_an_elastic_window_cuts_the_next_batches_by_the_counts() -> None:
    # counts 6 and 3 after a cursor of 10: rank 0 gets 10-15, rank 1 16-18
    w0 = WindowWork(10, 100, [6, 3], 0, iter)
    w1 = WindowWork(10, 100, [6, 3], 1, iter)
    assert (w0.block, w1.block, w0.size) == (range(10, 16), range(16, 19), 9)
    assert w0.has_more()
    # the epoch's tail: 5 batches left, cut 6:3 proportionally (floors, then one by one)
    t0, t1 = WindowWork(95, 100, [6, 3], 0, iter), WindowWork(95, 100, [6, 3], 1, iter)
    assert (len(t0.block), len(t1.block), t0.size) == (4, 1, 5)
    assert not t0.has_more()
    assert [t1.next(), t1.next()] == [99, None]
    # a rank that is not a member (count 0) gets nothing
    assert len(WindowWork(0, 100, [5, 0, 5], 1, iter).block) == 0


def test_before_calibration_a_fast_rank_claims_blocks_and_a_slow_one_stops_in_time() -> None:
    """Epoch 0 (all pool) on a simulated clock: rank 0 takes 6.5 ms a batch, rank 1 104 ms (16x).
    The fast rank claims blocks of up to COLD_BLOCK_S of its work (one counter add per batch
    before), and the slow one claims nothing the fast one would finish first, so the epoch ends
    within one fast block of the ideal, where the fast rank alone would end at 256 x 6.5 ms."""
    batch_s = [0.0065, 0.104]
    work, store, clock = EpochWork.plan(256, None, 2), _Store(), [0.0, 0.0]
    claims = [0, 0]

    def claim(r: int, k: int) -> int:
        claims[r] += 1
        return store.claim(k)

    def size(r: int) -> object:
        return lambda left, pace: claim_size(left, 2, None, r, pace)

    def rank(r: int) -> RankWork:
        return RankWork(
            work, r, partial(claim, r), store.peek, size(r), iter, clock=lambda: clock[r]
        )  # type: ignore[arg-type]

    ranks = [rank(0), rank(1)]
    ran: list[list[int]] = [[], []]
    live = [0, 1]
    while live:
        r = min(live, key=lambda q: clock[q])  # the rank whose clock is earliest acts next
        if (b := ranks[r].next()) is None:
            live.remove(r)
        else:
            ran[r].append(b)
            clock[r] += batch_s[r]
    assert sorted(ran[0] + ran[1]) == list(range(256))
    ideal = 256 / (1 / batch_s[0] + 1 / batch_s[1])
    assert max(clock) <= ideal + 0.04 + batch_s[0], (clock, ideal)
    assert claims[0] <= 256 // 4, claims  # blocks, not one add per batch
    assert 5 <= len(ran[1]) <= 16, ran[1]
