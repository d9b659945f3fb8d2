"""What an averaging round feeds to ElChe after the numbers are in (no process group needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from flodl_ddp import ConvergenceAction, NoGuard, Trainer
from flodl_ddp._ledger import EpochLedger
from flodl_ddp._policy import Overshoot
from flodl_ddp._rounds import AveragingRound
from flodl_ddp._verdicts import GuardRunner

sys.path.insert(0, str(Path(__file__).parent))
import ddp_trainer_fixtures as fx


def _round(relax_up: bool, guard: object) -> AveragingRound:
    from flodl_ddp import ElChe

    elche = ElChe(2, 10, relax_up=relax_up, max_anchor=12)
    return AveragingRound(
        0, 2, None, None, None, elche, GuardRunner(guard), None, Overshoot(None, 100)
    )  # type: ignore[arg-type]


def _feed(r: AveragingRound, boundary_ms: float = 1.5, cut: bool = False) -> None:
    # window compute ms, divergence, sync ms, boundary ms per rank: rank 1 twice as slow a batch
    stats = [[100.0, 0.001, 1.0, boundary_ms], [100.0, 0.001, 1.0, boundary_ms]]
    r._feed([20, 10], stats, False, cut, 0.1, _ledger())


def _ledger() -> EpochLedger:
    return EpochLedger(0, None, 0.0)


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


@pytest.mark.parametrize(("cut", "anchor"), [(False, 30), (True, 10)])
def test_a_window_cut_short_by_the_epoch_end_never_grows_the_anchor(cut: bool, anchor: int) -> None:
    r = _round(False, NoGuard())
    r.elche.max_anchor = 200
    for _ in range(4):
        _feed(r)  # Probe, Warmup: no auto-tune before Stable (5 calibrations)
    # overhead = boundary / longest compute = 30 / 100 = 0.3 > target 0.10 → ceil(10·0.3/0.1) = 30
    _feed(r, boundary_ms=30.0, cut=cut)
    assert r.elche.anchor == anchor
