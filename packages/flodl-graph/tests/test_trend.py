"""Trend / TrendGroup / Reduce / MetricStore against direct numpy computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flodl_core import ConfigError, PathError, ShapeError
from flodl_graph._trend import MetricStore, Reduce, Trend, TrendGroup, ols_slope

RNG = np.random.default_rng(7)
SERIES = [
    [],
    [3.0],
    [1.0, 2.0],
    [5.0, 5.0, 5.0, 5.0],
    list(RNG.normal(size=13)),
    list(np.linspace(2.0, 0.5, 20) + RNG.normal(scale=0.01, size=20)),
]
WINDOWS = [0, 1, 2, 3, 5, 50]


def _win(ys: list[float], w: int) -> np.ndarray:
    a = np.asarray(ys, dtype=np.float64)
    return a if w == 0 else a[-w:]


def np_slope(ys: np.ndarray) -> float:
    if len(ys) < 2:
        return 0.0
    x = np.arange(len(ys), dtype=np.float64)
    xc = x - x.mean()
    return float(np.dot(xc, ys - ys.mean()) / np.dot(xc, xc))


@pytest.mark.parametrize("ys", SERIES, ids=lambda s: f"n{len(s)}")
@pytest.mark.parametrize("w", WINDOWS)
def test_slope_and_predicates_match_numpy(ys: list[float], w: int) -> None:
    t = Trend(ys)
    y = _win(ys, w)
    ref = np_slope(y)
    assert t.slope(w) == pytest.approx(ref, abs=1e-12)
    for tol in (1e-6, 3e-2, 0.7, 2.5):
        assert t.stalled(w, tol) == (abs(ref) < tol)
        conv = len(y) >= 2 and float(np.var(y)) < tol  # np.var is the population variance
        assert t.converged(w, tol) == conv
    assert t.improving(w) == (ref < 0)


@pytest.mark.parametrize("ys", SERIES, ids=lambda s: f"n{len(s)}")
def test_summaries_match_numpy(ys: list[float]) -> None:
    t = Trend(ys, "loss")
    a = np.asarray(ys)
    assert len(t) == len(ys) and t.values() == [float(v) for v in ys]
    assert t.latest() == (float(a[-1]) if len(a) else 0.0)
    assert t.mean() == pytest.approx(float(a.mean()) if len(a) else 0.0, abs=1e-12)
    assert t.min() == (float(a.min()) if len(a) else math.inf)
    assert t.max() == (float(a.max()) if len(a) else -math.inf)
    assert t.last(3) == [float(v) for v in ys[-3:]]
    assert t.last(0) == []


def test_edge_cases_on_zero_and_one_point() -> None:
    for t in (Trend([]), Trend([4.2])):
        assert t.slope() == 0.0 and t.slope(5) == 0.0
        assert t.stalled(5, 1e-9)  # a flat slope: stalled by definition
        assert not t.improving(5)
        assert not t.converged(5, 1.0)  # needs two points


def test_improving_is_decreasing_and_window_selects_tail() -> None:
    t = Trend([10, 1, 2, 3, 4])  # big drop first, then rising
    assert t.improving(0)  # whole series trends down
    assert not t.improving(4)  # last four rise
    assert t.slope(4) == pytest.approx(1.0)


def test_constant_variance_zero_converges() -> None:
    t = Trend([2.0] * 6)
    assert t.converged(3, 1e-12) and t.stalled(3, 1e-12)
    assert not t.converged(3, 0.0)  # strict inequality


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None])
def test_bad_window_is_rejected(bad: object) -> None:
    with pytest.raises(ConfigError, match="window"):
        Trend([1.0, 2.0]).slope(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1e-3, float("nan"), "x", None])
def test_bad_tolerance_is_rejected(bad: object) -> None:
    with pytest.raises(ConfigError, match="tolerance"):
        Trend([1.0, 2.0]).stalled(2, bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="tolerance"):
        Trend([1.0, 2.0]).converged(2, bad)  # type: ignore[arg-type]


def test_bad_last_is_rejected() -> None:
    with pytest.raises(ConfigError, match="last"):
        Trend([1.0]).last(-2)


def test_ols_slope_degenerate_is_flat() -> None:
    assert ols_slope([1.0]) == 0.0
    assert ols_slope([3.0, 1.0]) == pytest.approx(-2.0)


def test_trend_is_a_snapshot() -> None:
    src = [1.0, 2.0]
    t = Trend(src)
    src.append(3.0)
    assert len(t) == 2


# --- TrendGroup ------------------------------------------------------------------------------


def test_group_queries_match_members() -> None:
    down = Trend([3.0, 2.0, 1.0], "a")
    flat = Trend([1.0, 1.0, 1.0], "b")
    g = TrendGroup([down, flat])
    assert g.names() == ["a", "b"] and len(g) == 2
    assert g.slopes() == [pytest.approx(-1.0), 0.0]
    assert g.mean_slope() == pytest.approx(np.mean([np_slope(np.array([3, 2, 1.0])), 0.0]))
    assert not g.all_improving() and g.any_improving()
    assert not g.all_stalled(0, 1e-3) and g.any_stalled(0, 1e-3)
    assert not g.all_converged(0, 1e-3) and g.any_converged(0, 1e-3)
    assert TrendGroup([down]).all_improving()
    assert g["a"] is down
    with pytest.raises(PathError, match="valid names here: a, b"):
        g["c"]


def test_empty_group_never_fires() -> None:
    g = TrendGroup({})
    assert not g.all_improving() and not g.all_stalled(3, 1.0) and not g.all_converged(3, 1.0)
    assert not g.any_improving() and not g.any_stalled(3, 1.0) and not g.any_converged(3, 1.0)
    assert g.mean_slope() == 0.0 and g.slopes() == []


# --- Reduce ----------------------------------------------------------------------------------


def test_reduce_matches_torch() -> None:
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    assert Reduce.MEAN.apply(x) == pytest.approx(x.mean().item(), rel=1e-6)
    assert Reduce.SUM.apply(x) == pytest.approx(x.sum().item(), rel=1e-6)
    assert Reduce.MAX.apply(x) == x.max().item()
    assert Reduce.MIN.apply(x) == x.min().item()
    assert Reduce.NORM.apply(x) == pytest.approx(torch.linalg.matrix_norm(x).item(), rel=1e-6)
    ints = torch.tensor([1, 2, 4])
    assert Reduce.MEAN.apply(ints) == pytest.approx(7 / 3)
    assert Reduce.NORM.apply(ints) == pytest.approx(math.sqrt(21))


def test_reduce_empty_tensor_errors() -> None:
    with pytest.raises(ShapeError, match=r"empty \(shape \(0, 3\)\).*MEAN"):
        Reduce.MEAN.apply(torch.zeros(0, 3))


# --- MetricStore -----------------------------------------------------------------------------


def test_store_flush_is_arithmetic_mean_and_keeps_first_seen_order() -> None:
    s = MetricStore()
    s.add("b", [1.0, 2.0, 6.0])
    s.add("a", [4.0])
    assert s.flush()
    assert s.latest() == {"b": 3.0, "a": 4.0}
    assert list(s.latest()) == ["b", "a"]
    assert not s.flush()  # nothing buffered
    s.add("a", [1.0])
    assert s.flush(["a", "missing"])
    assert s.history == {"b": [3.0], "a": [4.0, 1.0]}
    s.reset(["a"])
    assert s.known() == ["b"]
    s.reset()
    assert s.known() == [] and s.latest() == {}


@pytest.mark.parametrize(
    ("trends", "needle"),
    [
        ([1.0, 2.0], r"members must be Trend objects, got \{'0': 'float', '1': 'float'\}"),
        ({"loss": [1.0]}, r"got \{'loss': 'list'\}"),
        (None, "expected a mapping or a list of Trend, got NoneType"),
    ],
)
def test_trend_group_members_must_be_trends(trends: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        TrendGroup(trends)  # type: ignore[arg-type]
