"""When a cadence or async rank stops its window (a dict stands in for the store's counters)."""

from __future__ import annotations

from typing import Any

import pytest

from flodl_ddp._gate import Pace, WindowGate, finish_at, gate_keys, with_tail


class Counters:
    """The store's ``add``: add to a key, return its new value; a log of every call."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.calls: list[tuple[str, int]] = []

    def counter(self, key: str, add: int) -> int:
        self.calls.append((key, add))
        self.values[key] = self.values.get(key, 0) + add
        return self.values[key]


def gate(comm: Counters, **kw: Any) -> WindowGate:
    args: dict[str, Any] = {
        "waits": True, "limit": 100, "max_batch_diff": None, "fill_late": False,
        "settle": lambda: None,
    }  # fmt: skip
    args.update(kw)
    return WindowGate(comm, 2, 7, 3, **args)  # type: ignore[arg-type]


def run(g: WindowGate, most: int = 50) -> int:
    """Batches a rank runs before its gate stops it (at most ``most``)."""
    done = 0
    while done < most and g.keep_going(done):
        done += 1
    return done


def test_keys_are_per_window() -> None:
    assert gate_keys(7) == ("rdy7", "stp7")


def test_a_rank_that_does_not_wait_stops_at_its_count_without_the_store() -> None:
    c = Counters()
    g = gate(c, waits=False)
    assert run(g) == 3
    g.stop()
    assert c.calls == []


def test_a_waiting_rank_says_ready_once_after_paying_its_debt_and_runs_until_all_are() -> None:
    c = Counters()
    order: list[str] = []
    g = gate(c, settle=lambda: order.append(f"settle, ready={c.values.get('rdy7', 0)}"))
    assert [g.keep_going(d) for d in range(3)] == [True] * 3  # its count: no store call
    assert c.calls == []
    assert g.keep_going(3) and g.keep_going(4)  # ready alone: overshoot, polling
    assert order == ["settle, ready=0"]  # paid once, before the store saw "ready"
    assert c.calls == [("rdy7", 1), ("rdy7", 0)]
    c.counter("rdy7", 1)  # the other rank is ready
    assert not g.keep_going(5)
    g.stop()
    assert c.values == {"rdy7": 2, "stp7": 1}  # "ready" not said twice; "stopped" said


def test_the_overshoot_limit_and_max_batch_diff() -> None:
    assert run(gate(Counters(), limit=2)) == 5  # 3 + 2
    g = gate(Counters(), max_batch_diff=1)
    assert run(g) == 4 and g.throttled
    assert not gate(Counters()).throttled


def test_a_rank_whose_data_ran_out_still_says_ready_and_stopped() -> None:
    c = Counters()
    g = gate(c)
    assert g.keep_going(0)  # ... and then the epoch's data is gone: the loop breaks
    g.stop()
    assert c.values == {"rdy7": 1, "stp7": 1}


def test_the_rank_that_completes_ready_fills_the_others_last_batch() -> None:
    c = Counters()
    c.counter("rdy7", 1)  # the slow rank was ready first and is in an overshoot batch
    fast = gate(c, fill_late=True)
    assert run(fast, most=5) == 5  # everyone is ready, but the slow rank has not stopped
    c.counter("stp7", 1)  # its batch ended: it saw everyone ready and stopped
    assert not fast.keep_going(5)
    assert ("stp7", 0) in c.calls  # it read the stop count; it never added to it while running


def test_only_the_rank_that_completed_ready_and_was_allowed_fills() -> None:
    c = Counters()
    c.counter("rdy7", 1)
    assert run(gate(c, fill_late=False)) == 3  # a slow rank never makes the others wait more
    c2 = Counters()
    early = gate(c2, fill_late=True)
    assert run(early, most=4) == 4  # ready first: plain overshoot
    c2.counter("rdy7", 1)  # the other completes the set
    assert not early.keep_going(4)  # the early rank stops at once; the completer may fill


@pytest.mark.parametrize("waits", [False, True])
def test_an_epoch_nearly_done_is_run_in_this_window_not_one_of_its_own(waits: bool) -> None:
    """At its count, a rank that finds few batches left (``finish()``) keeps going until its
    data runs out: no store call, no "ready"; ``finish`` is asked once."""
    c = Counters()
    asked: list[int] = []

    def finish() -> bool:
        asked.append(1)
        return True

    g = gate(c, waits=waits, finish=finish)
    assert run(g, most=9) == 9  # past its count of 3, until the caller's data ran out
    assert len(asked) == 1
    assert c.calls == []
    g.stop()
    # a waiting rank still says it is ready and has stopped, for the others
    assert c.values == ({"rdy7": 1, "stp7": 1} if waits else {})


def test_an_epoch_with_more_left_stops_at_the_count_as_before() -> None:
    c = Counters()
    g = gate(c, waits=False, finish=lambda: False)
    assert run(g) == 3


def test_a_cadence_window_filled_by_the_fast_rank_ends_when_the_slow_one_is_ready() -> None:
    c = Counters()
    fast = gate(c, limit=3, fill_late=True)  # outpaces the slow cohort: up to one more count
    slow = gate(c, limit=0)  # the slow cohort: says "ready" at its count, runs no more
    assert run(fast, most=5) == 5  # its count, then fills while the slow rank trains
    assert run(slow) == 3
    assert c.values["rdy7"] == 2
    assert not fast.keep_going(5)  # the slow rank is ready and has not stopped: no fill
    slow.stop()
    fast.stop()
    assert c.values["stp7"] == 2


def test_a_filling_rank_stops_after_one_more_count_when_the_slow_one_is_late() -> None:
    c = Counters()
    fast = gate(c, limit=3, fill_late=True)
    assert run(fast) == 6  # 3 + one more count, then it waits at the round


@pytest.mark.parametrize(
    ("counts", "mine", "outpaces", "anyone_outpaces", "expect"),
    [
        ([15, 15], 15, False, False, 7),  # equal ranks: each may run the last 7 (a quarter of 30)
        ([40, 10], 40, True, True, 12),  # the fast rank beside a slow one: the short batches
        # the slow rank beside a fast one: the fast rank, stopped at the round, would wait for
        # all of its slow batches (a pair 16x apart idled 2.7 s of a 5 s epoch that way)
        ([40, 10], 10, False, True, None),
    ],
)
def test_only_a_rank_that_is_not_outpaced_runs_the_epochs_tail(
    counts: list[int], mine: int, outpaces: bool, anyone_outpaces: bool, expect: int | None
) -> None:
    assert finish_at(counts, mine, 100, Pace(outpaces, anyone_outpaces), False) == expect


@pytest.mark.parametrize(
    ("counts", "expect"),
    [
        ([134, 70], 5),  # F = 1.9: a quarter of the window would be 51 batches, 5 at most alone
        ([40, 10], 12),  # F = 4: up to 15 alone, the quarter (12) is less
        ([160, 10], 42),  # F = 16: up to 153 alone, the quarter (42) is less
    ],
)
def test_a_faster_rank_runs_a_tail_alone_only_while_sharing_it_would_not_pay(
    counts: list[int], expect: int
) -> None:
    """Sharing a tail of L batches with a rank F times slower saves the fast one L / (F + 1) of
    them and costs a round and the slow rank's batch in flight (~1 + F / 2): it runs the tail
    alone up to (F + 1)(F + 2) / 2. At F = 2 with windows of [134, 70] and 256 batches an
    epoch, the fast rank at its count with 48 left ran them all while the slow one idled ~400 ms
    of each ~1.8 s epoch, then a window of the slow rank's last 4 batches left it idle in turn."""
    assert finish_at(counts, counts[0], 1000, Pace(True, True), False) == expect


@pytest.mark.parametrize("left", [30, 25])
def test_a_window_that_reaches_the_epochs_end_is_run_out_by_every_rank(left: int) -> None:
    """Counts that cover what is left of the epoch: the slow rank too runs on past its count
    (the pool's claims stop it), instead of idling at the round until the epoch ends."""
    slow = Pace(outpaces=False, anyone_outpaces=True)
    assert finish_at([20, 10], 10, left, slow, False) == left
    assert finish_at([20, 10], 10, 31, slow, False) is None
    # under a max_batch_diff the ranks stay within it: the tail rule only
    assert finish_at([20, 10], 10, left, slow, True) is None
    assert finish_at([20, 10], 20, left, Pace(True, True), True) == 6  # F = 2: 6 at most alone


@pytest.mark.parametrize(
    ("counts", "left", "expected"),
    [
        ([38, 19], 62, [41, 21]),  # a tail of 5 (<= 28): shared 2 : 1, the slow rank's too
        ([40, 0], 45, [45, 0]),  # a benched rank stays out
        ([20, 10], 45, [30, 15]),  # a tail of half the window: nearer one window than two
        ([20, 10], 46, [20, 10]),  # 16 more, over half the window: a window of its own
        ([230, 10], 62, [230, 10]),  # the counts cover the epoch already
        ([38, 19], 57, [38, 19]),  # no tail
        ([0, 0], 5, [0, 0]),
    ],
)
def test_a_window_that_would_leave_a_tail_takes_it_in_proportion(
    counts: list[int], left: int, expected: list[int]
) -> None:
    got = with_tail(counts, left)
    assert got == expected
    if got != counts:
        assert sum(got) == left and all(g >= c for g, c in zip(got, counts, strict=True))
