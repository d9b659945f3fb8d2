"""The epoch rule: whether the slowest rank pays for itself, and how long it sits out."""

from __future__ import annotations

import pytest

from flodl_ddp._payoff import MAX_SIT_OUT, EpochCost, SitOut, epoch_cost


def test_an_epochs_cost_is_read_from_the_fastest_and_the_slowest_rank() -> None:
    # rank 0: 60 batches of 1.5 ms in a 100 ms epoch, 4 ms of it waiting; rank 1: 2 of 30 ms
    idle = [4.0, 38.0]
    cost = epoch_cost([100.0, 98.0], [60, 2], [90.0, 60.0], idle, [0, 1])
    assert cost == EpochCost(1, saved=pytest.approx(3.0), spent=10.0, waited=4.0, wall=100.0)
    # a training rank that ran nothing is the slowest, and saved nothing
    got = epoch_cost([100.0, 0.0], [62, 0], [93.0, 0.0], idle, [0, 1])
    assert got == EpochCost(1, 0.0, 7.0, 4.0, 100.0)
    # one rank: it is the fastest and the slowest (its spent is what the rule keeps)
    got = epoch_cost([100.0, 0.0], [62, 0], [93.0, 0.0], idle, [0])
    assert got == EpochCost(0, pytest.approx(93.0), 7.0, 4.0, 100.0)
    # one batch of rank 1 (60 ms) outlasts rank 0's whole epoch of compute (50 ms)
    assert epoch_cost([200.0, 199.0], [40, 1], [50.0, 60.0], [150.0, 0.0], [0, 1]).outlasts
    # nothing ran, or the fastest sent no wall: nothing to judge
    assert epoch_cost([1.0, 1.0], [0, 0], [0.0, 0.0], idle, [0, 1]) is None
    assert epoch_cost([0.0, 1.0], [5, 1], [5.0, 9.0], idle, [0, 1]) is None


def test_a_rank_pays_when_it_saves_more_than_it_costs_beyond_the_engine_alone() -> None:
    out = SitOut()
    cost = EpochCost(slowest=1, saved=3.0, spent=10.0, waited=4.0, wall=100.0)
    # nothing measured without it: only the 4 ms the fastest waited go with it
    assert out.extra(cost) == 4.0 and not out.pays(cost)
    out.without_ms = 8.0
    assert out.extra(cost) == 2.0 and out.pays(cost)  # 2 ms beyond the fastest's own 8
    assert not out.pays(EpochCost(1, 2.0, 10.0, 4.0, 100.0))  # a tie does not pay


@pytest.mark.parametrize(
    ("at_end", "out_epochs"),
    [(True, 1), (False, 0)],  # benched at an epoch's end: the next epoch; mid-epoch: its rest
)
def test_a_benched_rank_sits_out_then_comes_back(at_end: bool, out_epochs: int) -> None:
    out = SitOut()
    out.bench(at_end=at_end)
    starts = [out.epoch_start(True) for _ in range(out_epochs)]
    assert starts == [False] * out_epochs and out.whole == (out_epochs > 0)
    assert out.epoch_start(True) and out.back and not out.whole


def test_the_sit_out_doubles_while_the_rank_fails_on_its_return_and_resets_when_it_pays() -> None:
    out = SitOut()
    lengths = []
    for _ in range(7):
        out.bench(at_end=True)
        lengths.append(out.length)
        while not out.epoch_start(True):
            pass
    assert lengths == [1, 2, 4, 8, 16, MAX_SIT_OUT, MAX_SIT_OUT]
    out.paid()
    out.epoch_start(False)
    out.bench(at_end=True)
    assert out.length == 1 and out.left == 1


def test_a_return_costs_no_more_than_the_rank_adds_while_it_sits_out() -> None:
    # rank 1's batch takes 30 ms, the fastest's 1.5 ms (it adds 1/20 of the fastest), in epochs
    # of 100 ms: its return costs up to one 30 ms batch, what it adds in 30 / (100 / 20) = 6
    out = SitOut(wall_ms=100.0)
    out.bench(at_end=True, slow_ms=30.0, fast_ms=1.5)
    assert out.length == 1 and out.left == 6
    out = SitOut(wall_ms=100.0)
    out.bench(at_end=False, slow_ms=30.0, fast_ms=1.5)  # mid-epoch: the rest of it counts
    assert out.left == 5
    # no epoch measured yet: the doubling alone; a longer doubling wins over the floor
    out = SitOut()
    out.bench(at_end=True, slow_ms=30.0, fast_ms=1.5)
    assert out.left == 1
    out = SitOut(length=8, back=True, wall_ms=1000.0)
    out.bench(at_end=True, slow_ms=30.0, fast_ms=1.5)  # floor 1
    assert out.length == out.left == 16


def test_an_epoch_without_a_benched_rank_is_no_return() -> None:
    out = SitOut()
    out.bench(at_end=False)
    assert out.epoch_start(True)  # it came back: benched again in this epoch, it doubles
    assert not out.epoch_start(False) and not out.back  # an epoch later it no longer counts
    out.bench(at_end=True)
    assert out.length == 1


def test_the_state_round_trips_through_plain_types() -> None:
    out = SitOut(length=4, left=2, back=False, whole=True, without_ms=7.5, wall_ms=90.0)
    plain = {"length": 4.0, "left": 2, "back": 0, "whole": 1, "without_ms": 7.5, "wall_ms": 90}
    assert SitOut.from_state(plain) == out
    assert SitOut.from_state({**plain, "without_ms": None}).without_ms is None
    del plain["wall_ms"]  # a checkpoint from before the floor
    assert SitOut.from_state(plain).wall_ms is None
