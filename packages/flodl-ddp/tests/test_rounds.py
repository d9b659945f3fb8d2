"""What an averaging round feeds to ElChe after the numbers are in (no process group needed)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

from flodl_ddp import ConvergenceAction, NoGuard, Trainer
from flodl_ddp._comm import SoloComm
from flodl_ddp._gate import Overshoot
from flodl_ddp._ledger import EpochTally, RankLedger
from flodl_ddp._rounds import Arrival, AveragingRound, WindowReport

sys.path.insert(0, str(Path(__file__).parent))
import ddp_trainer_fixtures as fx
from rank_harness import thread_ranks


def _round(relax_up: bool, guard: object, comm: Any = None, averager: Any = None) -> AveragingRound:
    import torch

    from flodl_ddp import ElChe

    elche = ElChe(2, 10, relax_up=relax_up, max_anchor=12)
    tally = EpochTally(2, ["h", "h"], ["cpu", "cpu"])
    return AveragingRound(
        comm or SoloComm(), torch.device("cpu"), averager, elche, guard, None,
        Overshoot(None, 100), tally, RankLedger(0, None, 0.0),
    )  # type: ignore[arg-type]  # fmt: skip


def _feed(r: AveragingRound, boundary_ms: float = 1.5, cut: bool = False) -> None:
    # window compute ms, divergence, sync ms, boundary ms per rank: rank 1 twice as slow a batch
    got = [{"ms": 100.0, "div": 0.001, "sync_ms": 1.0, "boundary_ms": boundary_ms}] * 2
    r.feed(Arrival([20, 10], False, cut), got, (0, 1), False, 0.1)


def test_relax_up_grows_the_anchor_after_each_stable_round() -> None:
    r = _round(True, NoGuard())
    anchors = []
    for _ in range(4):
        _feed(r)
        anchors.append(r.elche.anchor)
    assert anchors == [11, 12, 12, 12]  # +1 per stable round, capped at max_anchor


def test_without_relax_up_the_anchor_holds() -> None:
    r = _round(False, NoGuard())
    for _ in range(4):
        _feed(r)
    assert r.elche.anchor == 10  # Warmup: no auto-tune yet, and no relaxing


class _Holding:
    """A guard that always asks to hold the anchor."""

    def report(self, report: object, k_used: int, k_max: int) -> ConvergenceAction:
        return ConvergenceAction.SUPPRESS_GROWTH


def test_relax_up_waits_for_a_stable_verdict() -> None:
    r = _round(True, _Holding())
    for _ in range(4):
        _feed(r)
    assert r.elche.anchor == 10


@pytest.mark.parametrize("on", [True, False])
def test_builder_passes_relax_up_to_the_config(on: bool) -> None:
    b = Trainer.builder(fx.make_model, fx.make_adam, fx.mse_step).elche_relax_up(on)
    assert b.build_config().elche_relax_up is on


@pytest.mark.parametrize(("cut", "anchor"), [(False, 60), (True, 10)])
def test_a_window_cut_short_by_the_epoch_end_never_grows_the_anchor(cut: bool, anchor: int) -> None:
    r = _round(False, NoGuard())
    r.elche.max_anchor = 200
    for _ in range(4):
        _feed(r)  # Probe, Warmup: no auto-tune before Stable (5 calibrations)
    # overhead = boundary / longest compute = 30 / 100 = 0.3 > target 0.05 → ceil(10·0.3/0.05) = 60
    _feed(r, boundary_ms=30.0, cut=cut)
    assert r.elche.anchor == anchor


class _NoAverage:
    """The averaging step, skipped: this file tests what a round decides."""

    bytes_sent = 0
    shared = False

    def stage(self) -> None:
        pass

    def average(self, weights: list[float], members: Any, rank: int) -> float:
        return 0.0


@pytest.mark.parametrize(
    ("more", "in_hand", "drained", "finished", "peeked"),
    [
        # a rank saw unclaimed pool blocks when it stopped, no rank holds batches: the pool
        # counter, read after the arrivals, decides
        ([True, False], [False, False], True, True, True),
        ([True, False], [False, False], False, False, True),
        # a rank still holds batches: the epoch goes on, no counter read
        ([True, True], [True, False], True, False, False),
        # nobody has data left: finished, no counter read
        ([False, False], [False, False], False, True, False),
    ],
)
def test_a_stale_data_left_does_not_cost_an_empty_window(
    more: list[bool], in_hand: list[bool], drained: bool, finished: bool, peeked: bool
) -> None:
    """Every rank reaches the same verdict from the exchanged flags and the pool counter."""

    def body(comm: Any) -> list[Any]:

        reads: list[int] = []
        r = _round(False, NoGuard(), comm, _NoAverage())

        def pool_drained() -> bool:
            reads.append(1)
            return drained

        report = WindowReport(1, 5, more[comm.rank], in_hand[comm.rank], 0.01, 0.0,
                              drained=pool_drained)  # fmt: skip
        res = r.average(report, (0, 1))
        return [res.finished, res.actual, bool(reads)]

    for res in thread_ranks(2, body):
        assert res == [finished, [5, 5], peeked]


def _bench_rank_1(r: AveragingRound) -> None:
    """Rank 1's one batch outlasts rank 0's epoch: benched at the epoch's end."""
    r.elche.judge_epoch([200.0, 200.0], [50, 1], [50.0, 200.0], [150.0, 0.0])
    assert r.elche.benched == [1]


def test_a_benched_ranks_wait_is_not_what_the_round_costs() -> None:
    r = _round(False, NoGuard())
    r.elche.max_anchor = 200
    for _ in range(5):
        _feed(r)  # Stable
    _bench_rank_1(r)
    anchor = r.elche.anchor
    # rank 0: 100 ms of compute and 1.5 ms to pass the window's end; rank 1, benched, waited
    # through the window: the overhead is 1.5 / 100, not 100 / 100
    got = [{"ms": 100.0, "div": 0.0, "sync_ms": 1.0, "boundary_ms": 1.5},
           {"ms": 0.0, "div": 0.0, "sync_ms": 1.0, "boundary_ms": 100.0}]  # fmt: skip
    r.feed(Arrival([20, 0], False, False), got, (0, 1), False, 0.1)
    # alone, rank 0 aims at the lowest overhead target, 0.01: ceil(anchor · 0.015 / 0.01)
    assert r.elche.anchor == math.ceil(anchor * 1.5)


def test_a_benched_rank_with_no_data_cuts_no_window() -> None:
    def body(comm: Any) -> bool:
        r = _round(False, NoGuard(), comm, _NoAverage())
        _bench_rank_1(r)
        report = WindowReport(1, 5 if comm.rank == 0 else 0, comm.rank == 0, False, 0.01, 0.0)
        return r.average(report, (0, 1)).cut

    assert thread_ranks(2, body) == [False, False]
