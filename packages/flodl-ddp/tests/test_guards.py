"""Convergence guards on scripted divergence sequences: exactly when each fires, and when not."""

from __future__ import annotations

import json
import math

import pytest

from flodl_core import CheckpointError, ConfigError
from flodl_ddp import (
    ActionKind,
    ConvergenceAction,
    ConvergenceGuard,
    DivergenceReport,
    MsfGuard,
    NoGuard,
    TrendGuard,
)

S = ConvergenceAction.STABLE
SUP = ConvergenceAction.SUPPRESS_GROWTH
NUDGE = ConvergenceAction.nudge_down(0.5)


def run(guard: ConvergenceGuard, ds: list[float], k_max: int = 10) -> list[ConvergenceAction]:
    return [guard.report(DivergenceReport([d / 2, d]), k_max, k_max) for d in ds]


def geometric(d0: float, lam: float, k: int, n: int) -> list[float]:
    """``n`` divergences growing by ``exp(lam·k)`` per averaging: λ_raw = lam exactly."""
    return [d0 * math.exp(lam * k * i) for i in range(n)]


def test_action_values() -> None:
    assert S.kind is ActionKind.STABLE and S.factor is None and S.allows_growth
    assert SUP.kind is ActionKind.SUPPRESS_GROWTH and not SUP.allows_growth
    assert NUDGE.kind is ActionKind.NUDGE_DOWN and NUDGE.factor == 0.5
    assert not NUDGE.allows_growth
    assert str(NUDGE) == "NUDGE_DOWN(0.5)" and str(SUP) == "SUPPRESS_GROWTH"
    with pytest.raises(ConfigError, match="nudge factor"):
        ConvergenceAction.nudge_down(1.5)


def test_divergence_report() -> None:
    assert DivergenceReport([0.01, 0.03, 0.02]).max == 0.03
    assert math.isnan(DivergenceReport([0.01, math.nan]).max)
    with pytest.raises(ConfigError, match=r"divergence of rank 1 is -0\.1"):
        DivergenceReport([0.1, -0.1])
    with pytest.raises(ConfigError, match="got none"):
        DivergenceReport([])


def test_protocol() -> None:
    for g in (NoGuard(), TrendGuard(), MsfGuard()):
        assert isinstance(g, ConvergenceGuard)


def test_no_guard() -> None:
    g = NoGuard()
    assert run(g, [0.1, 0.2, 0.4, 0.8, 1.6, 3.2]) == [S] * 6
    assert g.telemetry() == {} and g.state_dict() == {}


def test_trend_guard_sequence() -> None:
    g = TrendGuard(0.05)
    ds = [0.02, 0.04, 0.06, 0.08, 0.07, 0.09, 0.10, 0.10]
    assert run(g, ds) == [
        S,  # one value
        S,  # two values
        SUP,  # 0.02 < 0.04 < 0.06 and 0.06 > 0.05
        SUP,  # 0.04 < 0.06 < 0.08
        S,  # 0.08 > 0.07 breaks the rise
        S,  # 0.08, 0.07, 0.09: not increasing
        SUP,  # 0.07 < 0.09 < 0.10
        S,  # 0.10 = 0.10 is not strictly increasing
    ]
    assert g.history == [0.08, 0.07, 0.09, 0.10, 0.10]  # the ring keeps 5
    assert g.telemetry() == {"d_history_last": 0.10}


def test_trend_guard_below_threshold_and_never_nudges() -> None:
    # rising, but the last is not above 0.05 (0.05 itself included)
    assert run(TrendGuard(0.05), [0.01, 0.02, 0.03, 0.04, 0.05]) == [S] * 5
    # explosive growth only suppresses
    acts = run(TrendGuard(0.05), [0.1 * 2**i for i in range(10)])
    assert acts == [S, S] + [SUP] * 8
    # threshold 0.01: the same rising tail of small values now fires
    assert run(TrendGuard(0.01), [0.01, 0.02, 0.03]) == [S, S, SUP]


def test_trend_guard_state_and_reset() -> None:
    g = TrendGuard()
    run(g, [0.06, 0.07])
    h = TrendGuard()
    h.load_state_dict(json.loads(json.dumps(g.state_dict())))
    assert run(h, [0.08]) == [SUP]  # 0.06 < 0.07 < 0.08, carried over
    g.reset()
    assert run(g, [0.08]) == [S]
    with pytest.raises(CheckpointError, match="'history'"):
        h.load_state_dict({})
    with pytest.raises(ConfigError, match="threshold"):
        TrendGuard(-1.0)


def test_msf_constant_rate_gives_exact_lambda() -> None:
    # λ = 0.02 per step, k = 10: ln(D_t/D_{t-1})/10 = 0.02 each time. With a constant input
    # the bias-corrected EMA equals it: m1 = 0.1·0.02 = 0.002, 0.002/(1 − 0.9) = 0.02;
    # m2 = 0.9·0.002 + 0.002 = 0.0038, 0.0038/(1 − 0.81) = 0.02
    g = MsfGuard()
    run(g, geometric(1e-3, 0.02, 10, 3))
    t = g.telemetry()
    assert t["lambda_raw"] == pytest.approx(0.02, rel=1e-12)
    assert t["lambda_ema"] == pytest.approx(0.02, rel=1e-12)


def test_msf_both_streaks() -> None:
    # λ_ema = 0.02 > 1e-2 > 1e-3 at every estimate; the streaks count independently
    acts = run(MsfGuard(), geometric(1e-3, 0.02, 10, 10))
    assert acts == [
        S,  # D0: no previous D, no estimate
        S,  # soft 1, hard 1
        S,  # soft 2, hard 2
        NUDGE,  # hard 3 fires (and wins over soft 3); hard → 0, soft stays 3
        SUP,  # soft 4 >= 3 fires; soft → 0; hard 1
        S,  # soft 1, hard 2
        NUDGE,  # hard 3
        SUP,  # soft 4 (1, 2, 3 not fired because hard won at 3)
        S,
        NUDGE,
    ]


def test_msf_soft_only() -> None:
    # λ = 0.005: above 1e-3, below 1e-2 → only the suppress streak grows
    acts = run(MsfGuard(), geometric(1e-3, 0.005, 10, 8))
    assert acts == [S, S, S, SUP, S, S, SUP, S]
    # the same growth without the hard rule, at λ = 0.02: suppress every third estimate
    acts = run(MsfGuard(nudge=False), geometric(1e-3, 0.02, 10, 7))
    assert acts == [S, S, S, SUP, S, S, SUP]


def test_msf_quiet_and_shrinking() -> None:
    # λ = 5e-4 < 1e-3: never fires
    assert run(MsfGuard(), geometric(1e-3, 5e-4, 10, 8)) == [S] * 8
    # shrinking divergence: negative rates never fire
    assert run(MsfGuard(), geometric(1e-1, -0.02, 10, 8)) == [S] * 8


def test_msf_streak_broken_by_one_low_estimate() -> None:
    g = MsfGuard(nudge=False)
    # λ_raw: 0.005, 0.005, then D stays flat (λ_raw 0): m3 = 0.9·m2 = 0.9·0.00095 = 0.000855,
    # λ_ema = 0.000855/(1 − 0.729) = 0.003155 > 1e-3 → the streak survives one flat step...
    ds = geometric(1e-3, 0.005, 10, 3)
    ds.append(ds[-1])
    assert run(g, ds) == [S, S, S, SUP]
    assert g.lambda_ema == pytest.approx(0.000855 / 0.271)
    # ...but a sharp drop (λ_raw = ln(0.5)/10 = −0.0693) pulls λ_ema below 1e-3 and resets it
    g2 = MsfGuard(nudge=False)
    ds2 = geometric(1e-3, 0.005, 10, 3)
    ds2 += [ds2[-1] / 2, ds2[-1] / 2 * math.exp(0.05), ds2[-1] / 2 * math.exp(0.1)]
    acts = run(g2, ds2)
    assert acts[:4] == [S, S, S, S] and acts[4:] == [S, S]


def test_msf_bias_corrected_ema_numbers() -> None:
    g = MsfGuard()
    d0 = 1e-3
    g.report(DivergenceReport([d0]), 10, 10)
    g.report(DivergenceReport([d0 * math.exp(0.2)]), 10, 10)  # λ_raw = 0.02
    g.report(DivergenceReport([d0 * math.exp(0.2)]), 10, 10)  # λ_raw = 0
    # m1 = 0.002; m2 = 0.9·0.002 + 0 = 0.0018; λ_ema = 0.0018/(1 − 0.81) = 0.0094737
    t = g.telemetry()
    assert t["lambda_raw"] == 0.0
    assert t["lambda_ema"] == pytest.approx(0.0018 / 0.19, rel=1e-12)
    assert t["suppress_streak"] == 2 and t["nudge_streak"] == 0  # 0.0095 < 1e-2 broke it


def test_msf_floor_resets_and_k_max_zero_skips() -> None:
    g = MsfGuard()
    ds = geometric(1e-3, 0.02, 10, 3)  # soft 2, hard 2 after these
    run(g, ds)
    assert g.telemetry()["nudge_streak"] == 2
    # D = 1e-9 <= 1e-8: the estimator starts over
    assert g.report(DivergenceReport([1e-9]), 10, 10) == S
    assert g.telemetry() == {"suppress_streak": 0, "nudge_streak": 0}
    assert run(g, geometric(1e-3, 0.02, 10, 3)) == [S, S, S]  # needs a full new streak
    # k_max = 0 skips the estimate (streaks unchanged) but keeps D as the reference
    before = g.telemetry()
    d = 1e-3 * math.exp(0.2 * 3)
    assert g.report(DivergenceReport([d]), 0, 0) == S
    assert g.telemetry() == before
    assert g.report(DivergenceReport([d * math.exp(0.2)]), 10, 10) == NUDGE  # hard 3


def test_msf_custom_rules_and_errors() -> None:
    g = MsfGuard(suppress_threshold=0.01, suppress_streak=1, nudge_threshold=0.1)
    # λ = 0.02 > 0.01 → suppress every estimate; < 0.1 → never nudge
    assert run(g, geometric(1e-3, 0.02, 10, 4)) == [S, SUP, SUP, SUP]
    g = MsfGuard(nudge_streak=1, nudge_factor=0.25)
    assert run(g, geometric(1e-3, 0.02, 10, 2)) == [S, ConvergenceAction.nudge_down(0.25)]
    with pytest.raises(ConfigError, match="alpha"):
        MsfGuard(alpha=1.0)
    with pytest.raises(ConfigError, match="suppress_streak"):
        MsfGuard(suppress_streak=0)
    with pytest.raises(ConfigError, match="nudge_factor"):
        MsfGuard(nudge_factor=0.0)


def test_msf_state_round_trip() -> None:
    ds = geometric(1e-3, 0.02, 10, 10)
    a = MsfGuard()
    run(a, ds[:5])
    b = MsfGuard()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert run(a, ds[5:]) == run(b, ds[5:])
    assert a.telemetry() == b.telemetry()
    with pytest.raises(CheckpointError, match="'prev'"):
        b.load_state_dict({})
