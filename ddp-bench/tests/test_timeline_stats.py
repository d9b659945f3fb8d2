"""Per-rank time accounting from timeline spans, with hand-computed numbers."""

from __future__ import annotations

import pytest

from ddp_bench._timeline_stats import rank_times


def test_busy_idle_and_causes() -> None:
    spans = [
        (0, "compute", 1.0, 3.0), (0, "idle", 3.0, 4.0), (0, "sync", 4.0, 4.5),
        (1, "compute", 1.0, 4.0), (1, "sync", 4.0, 4.5), (1, "data", 4.5, 5.0),
        (0, "idle", 4.5, 5.0),  # around the epoch end at 4.8
        (1, "idle", 5.0, 5.5),  # nothing near: other
    ]  # fmt: skip
    r0, r1 = rank_times(spans, [("epoch_end", 4.8)], world_size=2)
    assert r0.wall_s == pytest.approx(4.5)  # 1.0 .. 5.5: start-up before 1.0 is not counted
    assert (r0.compute_s, r0.sync_s) == (2.0, 0.5)
    assert r0.idle_causes == {"sync_wait": 1.0, "epoch_boundary": 0.5, "untracked": 0.5}
    assert r0.idle_s == pytest.approx(2.0) and r0.busy_pct == pytest.approx(100 * 2.5 / 4.5)
    assert r1.idle_causes == {"other": 0.5} and r1.data_s == 0.5
    assert r1.idle_pct == pytest.approx(100 * 0.5 / 4.5)


def test_no_spans() -> None:
    (r,) = rank_times([], [], world_size=1)
    assert r.wall_s == 0 and r.busy_pct == 0 and r.idle_pct == 0
