"""ElChe's rules, each with hand-computed numbers (the arithmetic is in the comments)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from flodl_core import CheckpointError, ConfigError
from flodl_ddp import ElChe, Phase


def feed(e: ElChe, ms: list[float], sync_ms: float = 0.0, **kw: Any) -> None:
    """One window: every rank runs its current count at ``ms[r]`` milliseconds per batch."""
    batches = e.counts
    e.report_timing([m * b for m, b in zip(ms, batches, strict=True)], batches, sync_ms, **kw)


def test_cold_start() -> None:
    e = ElChe(2)
    assert e.counts == [10, 10] and e.anchor == 10 and e.anchor_rank == 0
    assert e.phase is Phase.PROBE and not e.calibrated and e.calibrations == 0
    assert e.ms_per_batch == [None, None]
    assert e.anchor_wall_ms() == 0.0
    assert e.throughput_shares() == [0.5, 0.5]
    assert e.recent_batch_share() == [0.5, 0.5]
    assert e.overhead is None


def test_first_calibration() -> None:
    e = ElChe(2)
    # walls [100, 200] ms over 10 batches each → 10 and 20 ms/batch
    e.report_timing([100.0, 200.0], [10, 10], 5.0)
    assert e.ms_per_batch == [10.0, 20.0]
    assert e.calibrations == 1 and e.phase is Phase.WARMUP and e.calibrated
    # slowest 20; cohort = ms >= 0.85·20 = 17 → {1}; no anchor yet → rank 1
    assert e.anchor_rank == 1
    # anchor rank runs 10; rank 0: round(10 · 20/10) = 20
    assert e.counts == [20, 10]
    assert e.anchor_wall_ms() == 200.0  # 10 · 20
    # shares ∝ 1/ms: 0.1 : 0.05 → 2/3 : 1/3
    assert e.throughput_shares() == pytest.approx([2 / 3, 1 / 3])
    assert e.overhead == 5.0 / 200.0  # sync / max(wall)
    assert e.anchor == 10  # no auto-tune before Stable


def test_actual_batches_not_intended() -> None:
    e = ElChe(2)
    # rank 0 ran only 4 of its batches in 40 ms: 10 ms/batch (not 40/10 = 4)
    e.report_timing([40.0, 200.0], [4, 10], 0.0)
    assert e.ms_per_batch == [10.0, 20.0]


def test_trust_window_is_mean_of_last_five() -> None:
    e = ElChe(2)
    for ms in (10.0, 12.0, 14.0, 16.0, 18.0, 20.0):
        e.report_timing([ms, 30.0], [1, 1], 0.0)
    # ring of 5 keeps 12, 14, 16, 18, 20 → mean 16
    assert e.ms_per_batch[0] == 16.0
    assert e.ms_per_batch[1] == 30.0


def test_five_misses_clear_a_window() -> None:
    e = ElChe(2)
    e.report_timing([10.0, 20.0], [1, 1], 0.0)
    assert e.calibrations == 1
    # a zero wall time or zero batches is a miss; 4 in a row keep the window
    for wall, batches in [(0.0, 1), (10.0, 0), (0.0, 1), (10.0, 0)]:
        e.report_timing([wall, 20.0], [batches, 1], 0.0)
        assert e.ms_per_batch[0] == 10.0
    assert e.calibrations == 5  # the old reading still counts while the window holds it
    e.report_timing([0.0, 20.0], [1, 1], 0.0)  # 5th miss in a row: window cleared
    assert e.ms_per_batch[0] is None
    assert e.calibrations == 5  # no calibration without a reading from every rank
    counts = e.counts
    e.report_timing([0.0, 20.0], [1, 1], 0.0)
    assert e.counts == counts and e.calibrations == 5
    e.report_timing([10.0, 20.0], [1, 1], 0.0)  # a valid reading resets the miss streak
    assert e.ms_per_batch[0] == 10.0 and e.calibrations == 6


def test_miss_streak_must_be_consecutive() -> None:
    e = ElChe(2)
    e.report_timing([10.0, 20.0], [1, 1], 0.0)
    for _ in range(3):
        for _ in range(4):
            e.report_timing([0.0, 20.0], [1, 1], 0.0)
        e.report_timing([10.0, 20.0], [1, 1], 0.0)  # breaks the streak after 4
    assert e.ms_per_batch[0] == 10.0


def test_first_reading_is_provisional() -> None:
    # rank 0 is a GPU whose first window carried its warm-up: 50 ms a batch, then 10
    e = ElChe(2)
    feed(e, [50.0, 20.0])
    # calibration 1 uses it (nothing better yet): slowest 50 → rank 0 anchors with 10 batches;
    # rank 1: round(10·50/20) = 25
    assert e.ms_per_batch == [50.0, 20.0] and e.anchor_rank == 0 and e.counts == [10, 25]
    feed(e, [10.0, 20.0])
    # the second reading replaces the first (a mean would say 30, still "slower" than 20);
    # the first settled calibration re-elects: slowest 20 → rank 1; rank 0: round(10·20/10) = 20
    assert e.ms_per_batch == [10.0, 20.0] and e.anchor_rank == 1 and e.counts == [20, 10]
    feed(e, [12.0, 20.0])  # settled: readings average again, (10 + 12)/2 = 11
    assert e.ms_per_batch == [11.0, 20.0] and e.anchor_rank == 1


def test_settling_skips_the_dead_zone_and_keeps_a_hinted_anchor() -> None:
    e = ElChe(2, speed_hint=(1, 2.0))
    assert e.counts == [20, 10]
    feed(e, [10.0, 19.5])  # provisional: rank 1 anchors (hinted); round(10·19.5/10) = 20
    assert e.counts == [20, 10]
    feed(e, [10.0, 20.5])
    # settled: 20.5 → round(20.5) = 21: 5 % of 20 = 1 is the dead zone, skipped when settling;
    # the hinted anchor rank was not elected from provisional readings: it stays
    assert e.ms_per_batch == [10.0, 20.5] and e.anchor_rank == 1 and e.counts == [21, 10]


def test_a_cleared_window_starts_provisional_again() -> None:
    e = ElChe(2)
    feed(e, [10.0, 20.0])
    feed(e, [10.0, 20.0])
    for _ in range(5):  # five misses of rank 0 clear its window
        e.report_timing([0.0, 200.0], [1, 10], 0.0)
    assert e.ms_per_batch[0] is None
    e.report_timing([30.0, 200.0], [1, 10], 0.0)  # back, warming up again: 30
    e.report_timing([8.0, 200.0], [1, 10], 0.0)  # replaces it
    assert e.ms_per_batch == [8.0, 20.0]


def test_phases() -> None:
    e = ElChe(2)
    seen = []
    for _ in range(21):
        feed(e, [10.0, 20.0])
        seen.append(e.phase)
    assert seen[0] is Phase.WARMUP and seen[3] is Phase.WARMUP  # 1..4
    assert seen[4] is Phase.STABLE and seen[18] is Phase.STABLE  # 5..19
    assert seen[19] is Phase.MATURE and seen[20] is Phase.MATURE  # 20+


def test_cohort_without_anchor_takes_lowest_index() -> None:
    e = ElChe(3)
    # slowest 20 → cohort ms >= 17 → {0 (19), 1 (20)}; no anchor → lowest index, rank 0
    e.report_timing([190.0, 200.0, 100.0], [10, 10, 10], 0.0)
    assert e.anchor_rank == 0
    # slow_ms = 19 (rank 0's); rank 1: round(10·19/20) = round(9.5) = 10 (halves go up);
    # rank 2: round(10·19/10) = 19
    assert e.counts == [10, 10, 19]


def test_dominance_margin() -> None:
    e = ElChe(3, speed_hint=(1, 2.0))
    for _ in range(5):
        feed(e, [21.0, 20.0, 10.0])
    assert e.phase is Phase.STABLE
    # cohort >= 0.85·21 = 17.85 → {0, 1}; rank 1 (current) stays: 21 is not > 1.1·20 = 22
    assert e.anchor_rank == 1
    # rank 0: round(10·20/21) = round(9.52) = 10; rank 2: round(10·20/10) = 20
    assert e.counts == [10, 10, 20]
    # rank 0's readings move to 23: its mean after k of them is (21·(5−k) + 23·k)/5
    feed(e, [23.0, 20.0, 10.0])  # k=1: 21.4
    feed(e, [23.0, 20.0, 10.0])  # k=2: 21.8, still <= 22
    assert e.anchor_rank == 1
    feed(e, [23.0, 20.0, 10.0])  # k=3: 22.2 > 22 → rank 0 takes over
    assert e.anchor_rank == 0
    # slow_ms = 22.2; rank 1: round(10·22.2/20) = 11, |11 − 10| = 1 > 0.5 → 11;
    # rank 2: round(10·22.2/10) = 22, |22 − 20| = 2 > 1 → 22
    assert e.counts == [10, 11, 22]


def test_outpaces_slow_cohort() -> None:
    e = ElChe(3)
    assert not any(e.outpaces_slow_cohort(r) for r in range(3))  # nothing measured yet
    # 19, 20, 16.9 ms a batch: the cohort is ms >= 0.85·20 = 17 → {0, 1}; 16.9 is below it
    e.report_timing([190.0, 200.0, 169.0], [10, 10, 10], 0.0)
    assert [e.outpaces_slow_cohort(r) for r in range(3)] == [False, False, True]


def test_no_election_during_warmup() -> None:
    # the hint is wrong: rank 2 is the fastest
    e = ElChe(3, speed_hint=(2, 2.0))
    assert e.counts == [20, 20, 10]  # cold start: slow rank 10, others round(10·2)
    feed(e, [20.0, 20.0, 10.0])
    # the hinted anchor exists, Warmup → no election; slow_ms = 10 (rank 2's)
    # ranks 0, 1: round(10·10/20) = 5; first calibration: no dead zone
    assert e.anchor_rank == 2 and e.counts == [5, 5, 10]
    for _ in range(3):
        feed(e, [20.0, 20.0, 10.0])
    assert e.calibrations == 4 and e.anchor_rank == 2
    feed(e, [20.0, 20.0, 10.0])  # 5th: Stable → election
    # cohort >= 17 → {0, 1}; current (2) not in it → lowest index, 0; slow_ms 20
    # rank 1: round(10·20/20) = 10 (5 → 10 is outside the dead zone); rank 2: 20
    assert e.anchor_rank == 0 and e.counts == [10, 10, 20]


def test_dead_zone() -> None:
    e = ElChe(2)
    for _ in range(5):  # fill both windows: [10]·5 and [20]·5
        feed(e, [10.0, 20.0])
    assert e.counts == [20, 10]
    # rank 0 reads 7.5 once: mean (4·10 + 7.5)/5 = 9.5 → target round(10·20/9.5) =
    # round(21.05) = 21; |21 − 20| = 1 <= 5 % of 20 = 1 → unchanged
    feed(e, [7.5, 20.0])
    assert e.ms_per_batch[0] == 9.5 and e.counts == [20, 10]
    # again: (3·10 + 2·7.5)/5 = 9.0 → round(22.2) = 22; |2| > 1 → moves
    feed(e, [7.5, 20.0])
    assert e.counts == [22, 10]


def test_dead_zone_skipped_on_first_calibration() -> None:
    e = ElChe(2, anchor=40)
    # ms [10.5, 10] → cohort {0, 1}, anchor rank 0 (lowest); rank 1: round(40·10.5/10) = 42;
    # |42 − 40| = 2 <= 5 % of 40 = 2 would hold it, but the first calibration always applies
    e.report_timing([420.0, 400.0], [40, 40], 0.0)
    assert e.anchor_rank == 0 and e.counts == [40, 42]


def test_max_batch_diff_clamps_each_update() -> None:
    e = ElChe(2, max_batch_diff=3)
    # target 20 for rank 0 (see test_first_calibration); +3 per update: 13, 16, 19, then 20
    # (|20 − 19| = 1 > 0.95, outside the dead zone)
    got = []
    for _ in range(4):
        feed(e, [10.0, 20.0])
        got.append(e.counts)
    assert got == [[13, 10], [16, 10], [19, 10], [20, 10]]


def test_lockstep() -> None:
    e = ElChe(2, max_batch_diff=0)
    feed(e, [10.0, 20.0])
    assert e.counts == [10, 10]
    assert e.throttled([1, 0]) == [0]
    assert e.throttled([3, 3]) == []


def test_throttled() -> None:
    e = ElChe(3, max_batch_diff=3)
    # leads over the slowest (3): 4, 0, 3 → only rank 0 leads by more than 3
    assert e.throttled([7, 3, 6]) == [0]
    assert e.throttled([6, 3, 6]) == []
    assert ElChe(3).throttled([100, 0, 50]) == []  # no limit


def test_speed_hint_cold_start() -> None:
    e = ElChe(3, anchor=10, speed_hint=(1, 1.25))
    # others: round(10·1.25) = round(12.5) = 13 (halves go up)
    assert e.anchor_rank == 1 and e.counts == [13, 10, 13]


def test_partition_ratios_initial_anchor() -> None:
    e = ElChe(3, partition_ratios=[0.5, 0.2, 0.3])
    assert e.anchor_rank == 1  # the smallest ratio
    assert e.throughput_shares() == pytest.approx([0.5, 0.2, 0.3])
    assert e.counts == [10, 10, 10]
    assert ElChe(3, partition_ratios=[3, 3, 4]).anchor_rank == 0  # tie → lowest rank
    # shares are normalised: 3/10, 3/10, 4/10
    assert ElChe(3, partition_ratios=[3, 3, 4]).throughput_shares() == pytest.approx(
        [0.3, 0.3, 0.4]
    )
    # the speed hint names the anchor when both are given
    assert ElChe(3, partition_ratios=[0.5, 0.2, 0.3], speed_hint=(2, 2.0)).anchor_rank == 2


def reach_stable(e: ElChe, ms: list[float], sync_ms: float) -> None:
    for _ in range(4):
        feed(e, ms, sync_ms)
    assert e.phase is Phase.WARMUP


def test_overhead_grows_anchor_only_when_stable() -> None:
    e = ElChe(2)
    # counts [20, 10] at 10 / 20 ms → walls 200, 200; sync 20 → overhead 20/200 = 0.1
    reach_stable(e, [10.0, 20.0], 20.0)
    assert e.anchor == 10 and e.overhead == 0.1  # Warmup: measured, not acted on
    feed(e, [10.0, 20.0], 20.0)  # 5th calibration: Stable
    # 0.1 > 0.05 → ceil(10 · 0.1/0.05) = 20
    assert e.anchor == 20
    # rank 1 (anchor) 20; rank 0: round(20·20/10) = 40
    assert e.counts == [40, 20]
    assert e.anchor_wall_ms() == 400.0  # 20 · 20


def test_overhead_in_band_keeps_anchor() -> None:
    e = ElChe(2, min_anchor=5)
    reach_stable(e, [10.0, 20.0], 5.0)
    feed(e, [10.0, 20.0], 5.0)  # 5/200 = 0.025: not > 0.05, not < 0.025
    assert e.anchor == 10


def test_overhead_shrinks_by_one_to_min() -> None:
    e = ElChe(2, min_anchor=8)
    reach_stable(e, [10.0, 20.0], 0.0)
    anchors = []
    for _ in range(4):
        feed(e, [10.0, 20.0], 2.0)  # walls ≈ 200 → overhead ≈ 0.01 < 0.025 → −1 per window
        anchors.append(e.anchor)
    assert anchors == [9, 8, 8, 8]  # stops at min_anchor


def test_growth_suppressed_by_guard() -> None:
    e = ElChe(2)
    reach_stable(e, [10.0, 20.0], 40.0)
    feed(e, [10.0, 20.0], 40.0, allow_growth=False)
    assert e.anchor == 10
    e2 = ElChe(2, min_anchor=5)
    reach_stable(e2, [10.0, 20.0], 0.0)
    feed(e2, [10.0, 20.0], 0.0, allow_growth=False)  # shrinking stays allowed
    assert e2.anchor == 9


def test_growth_clamped_to_bounds() -> None:
    e = ElChe(2, max_anchor=15)
    reach_stable(e, [10.0, 20.0], 40.0)
    feed(e, [10.0, 20.0], 40.0)  # 0.2 / 0.05: ceil(10·4) = 40 → max_anchor 15
    assert e.anchor == 15
    e = ElChe(2)  # min_anchor = 10
    reach_stable(e, [10.0, 20.0], 0.0)
    e.nudge_anchor_down(0.5)  # 5, below min_anchor
    assert e.anchor == 5 and e.counts == [10, 5]
    # walls: rank 0 runs 10 at 10 ms, rank 1 5 at 20 ms → 100, 100; sync 6 → 0.06 > 0.05
    # ceil(5 · 1.2) = 6 → clamped up to min_anchor 10
    feed(e, [10.0, 20.0], 6.0)
    assert e.anchor == 10


def test_overhead_target_clamped() -> None:
    assert ElChe(2, overhead_target=0.9).overhead_target == 0.5
    assert ElChe(2, overhead_target=0.001).overhead_target == 0.01
    assert ElChe(2, overhead_target=0.2).overhead_target == 0.2


def test_nudge_anchor_down() -> None:
    e = ElChe(2)
    feed(e, [10.0, 20.0])
    e.nudge_anchor_down(0.5)  # ceil(10·0.5) = 5
    # rank 1 (anchor) 5; rank 0: round(5·20/10) = 10, 20 → 10 is outside the dead zone
    assert e.anchor == 5 and e.counts == [10, 5]
    e.nudge_anchor_down(0.01)  # factor clamped to 0.1: ceil(5·0.1) = ceil(0.5) = 1
    assert e.anchor == 1
    e.nudge_anchor_down(0.1)  # max(1, ceil(0.1)) = 1
    assert e.anchor == 1
    e2 = ElChe(2, anchor=7)
    e2.nudge_anchor_down(3.0)  # clamped to 1.0: min(7, ceil(7)) = 7
    assert e2.anchor == 7
    e2.nudge_anchor_down(0.7)  # ceil(7·0.7) = ceil(4.9) = 5
    assert e2.anchor == 5 and e2.counts == [5, 5]  # uncalibrated: everyone runs the anchor
    with pytest.raises(ConfigError, match="factor"):
        e2.nudge_anchor_down(float("nan"))


def test_relax_anchor_up() -> None:
    off = ElChe(2)
    assert off.relax_anchor_up() is False and off.anchor == 10
    e = ElChe(2, relax_up=True)
    feed(e, [10.0, 20.0])
    assert e.relax_anchor_up() is True
    # anchor 11; rank 0: round(11·20/10) = 22
    assert e.anchor == 11 and e.counts == [22, 11]
    top = ElChe(2, anchor=5, max_anchor=5, relax_up=True)
    assert top.relax_anchor_up() is False and top.anchor == 5


def test_relax_refused_by_max_batch_diff() -> None:
    e = ElChe(2, relax_up=True, max_batch_diff=10)
    feed(e, [10.0, 20.0])  # 10 → 20 is a change of 10, allowed: counts [20, 10]
    assert e.counts == [20, 10]
    # projected: anchor 11, fast round(11·2) = 22; 22 − 11 = 11 > 10 → refused
    assert e.relax_anchor_up() is False
    assert e.anchor == 10 and e.counts == [20, 10]
    e2 = ElChe(2, relax_up=True, max_batch_diff=11)
    feed(e2, [10.0, 20.0])
    assert e2.relax_anchor_up() is True and e2.anchor == 11  # 11 <= 11


def test_clamp_total() -> None:
    e = ElChe(2)
    feed(e, [10.0, 20.0])  # counts [20, 10]
    # floors of 20·16/30 = 10.67 and 10·16/30 = 5.33 → [10, 5] = 15; +1 from rank 0 → [11, 5]
    assert e.clamp_total(16) == [11, 5]
    assert e.clamp_total(30) == [20, 10] and e.clamp_total(100) == [20, 10]
    assert e.clamp_total(0) == [0, 0]
    assert ElChe(2, speed_hint=(1, 3.0)).clamp_total(2) == [1, 1]  # no nonzero count cut to 0
    assert e.counts == [20, 10]  # unchanged
    # [7, 7, 7] → 10: floors 70/21 = 3.33 → [3, 3, 3] = 9; +1 to rank 0 → [4, 3, 3]
    assert ElChe(3, anchor=7).clamp_total(10) == [4, 3, 3]
    # [7, 7, 7] → 20: floors 140/21 = 6.67 → 18; +1 to ranks 0 and 1 → [7, 7, 6]
    assert ElChe(3, anchor=7).clamp_total(20) == [7, 7, 6]
    with pytest.raises(ConfigError, match="max_total"):
        e.clamp_total(-1)


def test_recent_batch_share() -> None:
    e = ElChe(2, max_batch_diff=3)
    for _ in range(4):
        feed(e, [10.0, 20.0])
    # snapshots [13,10] [16,10] [19,10] [20,10]: rank 0 68, rank 1 40 of 108
    assert e.recent_batch_share() == pytest.approx([68 / 108, 40 / 108])
    for _ in range(9):
        feed(e, [10.0, 20.0])
    # the last 10 snapshots are all [20, 10] → 2/3, 1/3
    assert e.recent_batch_share() == pytest.approx([2 / 3, 1 / 3])


def test_counts_settle_on_two_to_one() -> None:
    rng = random.Random(0)
    e = ElChe(2, anchor=20)
    for _ in range(6):  # each reading ±5 % noise around 10 and 20 ms/batch
        feed(e, [10.0 * rng.uniform(0.95, 1.05), 20.0 * rng.uniform(0.95, 1.05)])
    fast, slow = e.counts
    assert e.anchor_rank == 1 and slow == 20
    assert abs(fast / slow - 2.0) <= 0.2  # within 10 % of 2:1
    shares = e.throughput_shares()
    assert abs(shares[0] / shares[1] - 2.0) <= 0.2


def test_state_dict_round_trip() -> None:
    a = ElChe(3, relax_up=True, max_batch_diff=4, speed_hint=(2, 1.5))
    seq = [[12.0, 9.0, 20.0], [11.0, 10.0, 22.0], [0.0, 10.0, 21.0]]
    for ms in seq * 3:
        feed(a, ms, 3.0)
    a.nudge_anchor_down(0.8)
    state = json.loads(json.dumps(a.state_dict()))  # plain JSON types
    b = ElChe(3)
    b.load_state_dict(state)
    assert b.state_dict() == a.state_dict()
    for ms in seq * 4:
        feed(a, ms, 30.0)
        feed(b, ms, 30.0)
        assert (a.counts, a.anchor, a.anchor_rank, a.phase) == (
            b.counts,
            b.anchor,
            b.anchor_rank,
            b.phase,
        )
    assert a.recent_batch_share() == b.recent_batch_share()
    assert a.relax_anchor_up() == b.relax_anchor_up()
    with pytest.raises(CheckpointError, match="world_size 3"):
        ElChe(2).load_state_dict(state)
    # saved between a rank's first (provisional) reading and its second: continues alike
    a = ElChe(2)
    feed(a, [50.0, 20.0])
    b = ElChe(2)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    feed(a, [10.0, 20.0])
    feed(b, [10.0, 20.0])
    assert b.state_dict() == a.state_dict() and b.counts == [20, 10]
    # a state that lacks a key is refused naming it, and the ElChe it was loaded into is as before
    for key in ("windows", "provisional"):
        partial = {k: v for k, v in a.state_dict().items() if k != key}
        c = ElChe(2)
        with pytest.raises(CheckpointError, match=f"'{key}'"):
            c.load_state_dict(partial)
        assert c.state_dict() == ElChe(2).state_dict()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"world_size": 0}, "world_size must be an int >= 1"),
        ({"world_size": 2, "anchor": 0}, "anchor must be an int >= 1"),
        ({"world_size": 2, "anchor": 20, "max_anchor": 10}, "anchor=20 exceeds max_anchor=10"),
        ({"world_size": 2, "anchor": 5, "min_anchor": 8}, "min_anchor=8 exceeds anchor=5"),
        ({"world_size": 2, "overhead_target": 0}, "overhead_target must be a finite number > 0"),
        ({"world_size": 2, "max_batch_diff": -1}, "max_batch_diff must be an int >= 0"),
        ({"world_size": 2, "speed_hint": (2, 2.0)}, "slow_rank 2 is out of range"),
        ({"world_size": 2, "speed_hint": (0, 0.0)}, "speed_hint ratio must be"),
        ({"world_size": 2, "speed_hint": 2.0}, r"speed_hint must be \(slow_rank, ratio\)"),
        ({"world_size": 2, "partition_ratios": [1.0]}, "1 entries for world_size 2"),
        ({"world_size": 2, "partition_ratios": [1.0, -1]}, r"partition_ratios\[1\]"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ElChe(**kwargs)  # type: ignore[arg-type]


def test_report_errors() -> None:
    e = ElChe(2)
    with pytest.raises(ConfigError, match="wall_ms has 1 entries"):
        e.report_timing([1.0], [1, 1], 0.0)
    with pytest.raises(ConfigError, match=r"wall_ms\[1\] must be a finite number >= 0"):
        e.report_timing([1.0, -1.0], [1, 1], 0.0)
    with pytest.raises(ConfigError, match=r"batches\[0\] must be an int >= 0"):
        e.report_timing([1.0, 1.0], [1.5, 1], 0.0)  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="sync_ms"):
        e.report_timing([1.0, 1.0], [1, 1], float("inf"))
    assert e.calibrations == 0


def test_the_overhead_target_follows_what_the_slow_ranks_add() -> None:
    """A rank 16x slower adds 1/16 of the fast one's throughput: the rounds may cost at most
    half of that, 0.03125, below the default target 0.05."""
    e = ElChe(2)
    reach_stable(e, [10.0, 160.0], 64.0)  # counts [160, 10]: walls 1600, 1600; 64/1600 = 0.04
    assert e.gain() == pytest.approx(0.0625) and e.anchor == 10
    feed(e, [10.0, 160.0], 64.0)  # Stable: 0.04 > 0.03125 → ceil(10 · 0.04 / 0.03125) = 13
    assert e.anchor == 13
    e2 = ElChe(2)
    reach_stable(e2, [10.0, 20.0], 8.0)  # a 2x slower rank adds 0.5: the target stays 0.05
    feed(e2, [10.0, 20.0], 8.0)  # 8/200 = 0.04 < 0.05: no growth
    assert e2.anchor == 10


def test_a_rank_that_costs_more_than_it_adds_is_benched_then_measured_again() -> None:
    e = ElChe(2, max_anchor=10)  # windows cannot grow: the cost stays
    reach_stable(e, [10.0, 80.0], 160.0)  # 160/800 = 0.2 of overhead
    assert e.benched == []  # not acted on before Stable
    feed(e, [10.0, 80.0], 160.0)  # gain 0.125 <= 0.2 → bench the slowest, rank 1
    assert e.benched == [1] and e.last_bench == (1, pytest.approx(0.125), pytest.approx(0.2))
    assert e.anchor_rank == 0 and e.counts == [10, 0]
    assert e.throughput_shares() == [1.0, 0.0] and not e.outpaces_slow_cohort(0)
    for _ in range(6):  # a benched rank runs nothing, and that is no miss
        e.report_timing([100.0, 0.0], [10, 0], 1.0)
    assert e.ms_per_batch[1] == pytest.approx(80.0) and e.benched == [1]
    assert e.reprobe() == [1]  # an epoch starts: it trains again
    assert e.benched == [] and e.counts[1] > 0
    feed(e, [10.0, 80.0], 2.0)  # cheap rounds now: 2/800 → it stays in
    assert e.benched == []
    # a window cut short by the epoch's end benches nobody, whatever its overhead says
    e3 = ElChe(2, max_anchor=10)
    reach_stable(e3, [10.0, 80.0], 160.0)
    feed(e3, [10.0, 80.0], 160.0, cut=True)
    assert e3.benched == []
    # nor is a rank benched while it holds batches it has not run: only it would run them
    feed(e3, [10.0, 80.0], 160.0, holding=[False, True])
    assert e3.benched == []
    feed(e3, [10.0, 80.0], 160.0, holding=[True, False])
    assert e3.benched == [1]


def test_a_short_epoch_judges_the_slowest_rank_over_the_whole_epoch() -> None:
    """Epochs shorter than a window: every window is cut, so only the epoch rule judges."""
    e = ElChe(2)
    # readings of rank 1 8x behind: its return (one 12 ms batch) costs no more than it adds in
    # an epoch of 100 ms, so it sits out 1, 2, 4 ... epochs (the floor: next test)
    reach_stable(e, [1.5, 12.0], 1.0)
    e.judge_epoch([100.0, 98.0], [60, 2], [90.0, 60.0], [5.0, 38.0])  # Warmup: not judged
    assert e.benched == []
    feed(e, [1.5, 12.0], 1.0, cut=True)  # Stable
    # rank 1's 2 batches saved rank 0 3 ms; rank 0 waited 5 of its 100 ms for it
    e.judge_epoch([100.0, 98.0], [60, 2], [90.0, 60.0], [5.0, 38.0])
    assert e.benched == [1] and e.counts == [e.anchor, 0]
    assert e.last_bench == (1, pytest.approx(0.03), pytest.approx(0.05))
    assert e.reprobe() == []  # it sits the next epoch out, in which rank 0 alone spends 4 ms
    e.judge_epoch([97.0, 1.0], [62, 0], [93.0, 0.0], [0.0, 1.0])
    assert e.reprobe() == [1] and e.counts[1] > 0
    e.judge_epoch([96.0, 95.0], [60, 2], [90.0, 66.0], [1.0, 29.0])  # 3 saved > 6 - 4: it pays
    assert e.benched == [] and e.reprobe() == []
    idle = [1.0, 68.0]
    e.judge_epoch([100.0, 98.0], [61, 1], [90.0, 30.0], idle)  # 1.5 saved < 6: 1 epoch out
    assert [e.reprobe() for _ in range(2)] == [[], [1]]
    e.judge_epoch([100.0, 98.0], [61, 1], [90.0, 30.0], idle)  # again on its return: 2 out
    assert [e.reprobe() for _ in range(3)] == [[], [], [1]]
    state = json.loads(json.dumps(e.state_dict()))
    assert state["sit_out"]["length"] == 2 and state["sit_out"]["without_ms"] == 4.0
    # equal ranks, each saving the other half the epoch: nobody is benched
    q = ElChe(2)
    reach_stable(q, [10.0, 10.0], 1.0)
    feed(q, [10.0, 10.0], 1.0)
    q.judge_epoch([330.0, 330.0], [31, 31], [310.0, 310.0], [5.0, 5.0])
    assert q.benched == []


def test_a_rank_whose_one_batch_outlasts_the_epoch_is_benched_before_stable() -> None:
    """Before Stable only a rank whose one batch outlasts the fastest's whole epoch of compute
    is judged; it sits out until its return (it costs up to one of its batches) costs no more
    than it adds meanwhile."""
    e = ElChe(2)
    feed(e, [1.0, 200.0], 1.0, cut=True)  # first calibration: Warmup
    # rank 0: 50 batches of 1 ms, then 150 ms waiting for rank 1's one batch of 200 ms
    e.judge_epoch([200.0, 200.0], [50, 1], [50.0, 200.0], [150.0, 0.0])
    assert e.phase is Phase.WARMUP and e.benched == [1]
    # it adds 1/200 of rank 0, 1 ms an epoch of 200 ms: 200 epochs pay for one 200 ms return
    for _ in range(200):
        assert e.reprobe() == []
    assert e.reprobe() == [1]


def test_members_rebalance_the_survivors_and_measure_a_rejoining_rank_afresh() -> None:
    e = ElChe(3)
    reach_stable(e, [10.0, 10.0, 20.0], 0.0)
    assert e.counts == [20, 20, 10] and e.anchor_rank == 2
    e.set_members([0, 1])  # the anchor rank died
    assert e.counts == [10, 10, 0] and e.anchor_rank in (0, 1) and e.members == [0, 1]
    feed(e, [10.0, 10.0, 0.0])  # no miss for a rank that is not a member
    e.set_members([0, 1, 2])  # it comes back: cold count, empty trust window
    assert e.ms_per_batch[2] is None and e.counts[2] == e.anchor
    feed(e, [10.0, 10.0, 20.0])  # its first reading: the counts follow at once
    assert e.counts == [20, 20, 10] and e.anchor_rank == 2
    with pytest.raises(ConfigError, match="members"):
        e.set_members([0, 5])
