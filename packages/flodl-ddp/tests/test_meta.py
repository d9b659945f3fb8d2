"""MetaController on scripted (lr, anchor, verdict, phase) sequences."""

from __future__ import annotations

import json

import pytest

from flodl_core import CheckpointError, ConfigError
from flodl_ddp import ConvergenceAction, MetaController, Phase

S = ConvergenceAction.STABLE
SUP = ConvergenceAction.SUPPRESS_GROWTH
NUDGE = ConvergenceAction.nudge_down(0.5)


def test_probe_never_fires() -> None:
    m = MetaController()
    assert m.observe(0.1, 10, SUP, Phase.PROBE) is None
    assert m.observe(0.01, 10, SUP, Phase.PROBE) is None  # a 90 % cliff, but Probe


def test_lr_cliff() -> None:
    m = MetaController()
    assert m.observe(0.1, 10, S, Phase.STABLE) is None
    assert m.observe(0.075, 10, S, Phase.STABLE) is None  # (0.1 − 0.075)/0.1 = 0.25 <= 0.3
    # (0.075 − 0.045)/0.075 = 0.4 > 0.3; anchors all 10 → trend 0 → clamp(0.5 − 0) = 0.5
    assert m.observe(0.045, 10, S, Phase.STABLE) == pytest.approx(0.5)
    assert m.observe(0.045, 10, S, Phase.STABLE) is None  # no further drop
    assert m.telemetry() == {"anchor_trend": 0.0}


def test_anchor_trend_scales_the_factor() -> None:
    m = MetaController()
    for _ in range(4):
        m.observe(0.1, 10, S, Phase.STABLE)
    # anchors 10, 10, 10, 10, 20: mean 12, trend (20 − 12)/12 = 2/3
    # factor = 0.5 − 0.5·(2/3) = 1/6
    assert m.observe(0.05, 20, S, Phase.STABLE) == pytest.approx(1 / 6)
    assert m.anchor_trend == pytest.approx(2 / 3) and not m.settled

    m = MetaController()
    for _ in range(4):
        m.observe(0.1, 20, S, Phase.STABLE)
    # anchors 20·4, 10: mean 18, trend −8/18 = −0.444; 0.5 + 0.5·0.444 = 0.7222
    assert m.observe(0.05, 10, S, Phase.STABLE) == pytest.approx(0.5 + 0.5 * 8 / 18)

    m = MetaController()
    for _ in range(4):
        m.observe(0.1, 10, S, Phase.STABLE)
    # anchors 10·4, 50: mean 18, trend 32/18 = 1.78; 0.5 − 0.89 < 0.1 → clamped to 0.1
    assert m.observe(0.05, 50, S, Phase.STABLE) == pytest.approx(0.1)


def test_settled() -> None:
    m = MetaController()
    assert m.anchor_trend == 0.0 and m.settled  # fewer than two anchors
    m.observe(0.1, 10, S, Phase.WARMUP)
    m.observe(0.1, 11, S, Phase.WARMUP)  # mean 10.5, trend 0.5/10.5 = 0.048 < 0.1
    assert m.settled
    m.observe(0.1, 14, S, Phase.WARMUP)  # mean 35/3, trend (14 − 11.67)/11.67 = 0.2
    assert m.anchor_trend == pytest.approx(0.2) and not m.settled


@pytest.mark.parametrize(
    ("phase", "k", "base"),
    [(Phase.WARMUP, 5, 0.3), (Phase.STABLE, 3, 0.5), (Phase.MATURE, 2, 0.7)],
)
def test_verdict_streak_per_phase(phase: Phase, k: int, base: float) -> None:
    m = MetaController()
    verdicts = [SUP, NUDGE] * 3
    for v in verdicts[: k - 1]:
        assert m.observe(0.1, 10, v, phase) is None
    assert m.observe(0.1, 10, verdicts[k - 1], phase) == pytest.approx(base)
    # the window was emptied: the next firing needs k fresh verdicts
    for v in verdicts[: k - 1]:
        assert m.observe(0.1, 10, v, phase) is None
    assert m.observe(0.1, 10, SUP, phase) == pytest.approx(base)


def test_stable_verdict_breaks_the_streak() -> None:
    m = MetaController()
    acts = [m.observe(0.1, 10, v, Phase.STABLE) for v in [SUP, SUP, S, SUP, SUP]]
    assert acts == [None] * 5
    assert m.observe(0.1, 10, SUP, Phase.STABLE) == pytest.approx(0.5)  # SUP, SUP, SUP


def test_streak_spans_a_phase_change() -> None:
    m = MetaController()
    m.observe(0.1, 10, SUP, Phase.WARMUP)
    m.observe(0.1, 10, SUP, Phase.WARMUP)  # 2 of Warmup's 5
    assert m.observe(0.1, 10, SUP, Phase.STABLE) == pytest.approx(0.5)  # Stable needs 3


def test_both_watchers_multiply() -> None:
    m = MetaController()
    m.observe(0.1, 10, SUP, Phase.STABLE)
    m.observe(0.1, 10, SUP, Phase.STABLE)
    # streak (base 0.5) and a cliff 0.1 → 0.04 (base 0.5): 0.5 · 0.5 = 0.25
    assert m.observe(0.04, 10, SUP, Phase.STABLE) == pytest.approx(0.25)
    t = m.telemetry()
    assert t["lr_cliff"] == 1.0 and t["verdict_streak"] == 1.0 and t["factor"] == 0.25

    m = MetaController()
    for _ in range(4):
        m.observe(0.1, 100, S, Phase.MATURE)
    m.observe(0.1, 100, SUP, Phase.MATURE)
    # anchors 100·4, 10: mean 82, trend −72/82 = −0.878
    # streak: 0.7 + 0.3·0.878 = 0.963 → 0.95; cliff: 0.5 + 0.5·0.878 = 0.939
    # product 0.95 · 0.939 = 0.892
    got = m.observe(0.05, 10, SUP, Phase.MATURE)
    assert got == pytest.approx(0.95 * (0.5 + 0.5 * 72 / 82))


def test_state_round_trip_and_errors() -> None:
    a = MetaController()
    a.observe(0.1, 10, SUP, Phase.STABLE)
    a.observe(0.1, 12, SUP, Phase.STABLE)
    b = MetaController()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert a.observe(0.05, 12, SUP, Phase.STABLE) == b.observe(0.05, 12, SUP, Phase.STABLE)
    assert a.state_dict() == b.state_dict()
    b.reset()
    assert b.state_dict() == {"lrs": [], "anchors": [], "verdicts": []}
    with pytest.raises(CheckpointError, match="'lrs'"):
        b.load_state_dict({})
    with pytest.raises(ConfigError, match="lr must be a finite number"):
        b.observe(float("nan"), 10, S, Phase.STABLE)
    with pytest.raises(ConfigError, match="anchor must be an int >= 1"):
        b.observe(0.1, 0, S, Phase.STABLE)
    with pytest.raises(ConfigError, match="action must be a ConvergenceAction"):
        b.observe(0.1, 10, "stable", Phase.STABLE)  # type: ignore[arg-type]
