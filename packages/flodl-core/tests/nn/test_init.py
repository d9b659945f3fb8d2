"""Init functions: identical draws to torch.nn.init for the same seed, statistics otherwise."""

from __future__ import annotations

import math

import pytest
import torch

from flodl_core import ConfigError, init

SHAPE = (64, 32, 3, 3)  # conv weight: fan_in 288, fan_out 576


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (lambda t, g: init.xavier_uniform(t, 0.5, generator=g),
         lambda t, g: torch.nn.init.xavier_uniform_(t, 0.5, generator=g)),
        (lambda t, g: init.xavier_normal(t, 2.0, generator=g),
         lambda t, g: torch.nn.init.xavier_normal_(t, 2.0, generator=g)),
        (lambda t, g: init.kaiming_uniform(t, a=math.sqrt(5), generator=g),
         lambda t, g: torch.nn.init.kaiming_uniform_(t, a=math.sqrt(5), generator=g)),
        (lambda t, g: init.kaiming_normal(t, mode="fan_out", nonlinearity="relu", generator=g),
         lambda t, g: torch.nn.init.kaiming_normal_(
             t, mode="fan_out", nonlinearity="relu", generator=g)),
        (lambda t, g: init.orthogonal(t, 1.5, generator=g),
         lambda t, g: torch.nn.init.orthogonal_(t, 1.5, generator=g)),
        (lambda t, g: init.trunc_normal(t, 0.1, 0.02, -0.05, 0.2, generator=g),
         lambda t, g: torch.nn.init.trunc_normal_(t, 0.1, 0.02, -0.05, 0.2, generator=g)),
        (lambda t, g: init.uniform(t, -2.0, 3.0, generator=g),
         lambda t, g: torch.nn.init.uniform_(t, -2.0, 3.0, generator=g)),
        (lambda t, g: init.normal(t, 1.0, 0.5, generator=g),
         lambda t, g: torch.nn.init.normal_(t, 1.0, 0.5, generator=g)),
    ],
    ids=["xavier_uniform", "xavier_normal", "kaiming_uniform", "kaiming_normal", "orthogonal",
         "trunc_normal", "uniform", "normal"],
)  # fmt: skip
def test_same_draws_as_torch(ours, theirs) -> None:
    a, b = torch.empty(SHAPE), torch.empty(SHAPE)
    assert ours(a, _gen()) is a
    theirs(b, _gen())
    torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_in_place_on_parameter_without_history() -> None:
    p = torch.nn.Parameter(torch.zeros(8, 4))
    out = init.xavier_uniform(p)
    assert out is p and p.grad_fn is None and p.requires_grad
    assert p.abs().sum() > 0


def test_uniform_bias_is_torch_linear_default() -> None:
    lin = torch.nn.Linear(50, 7)
    torch.manual_seed(5)
    torch.nn.init.kaiming_uniform_(lin.weight, a=math.sqrt(5))
    expected_bias = torch.empty(7).uniform_(-1 / math.sqrt(50), 1 / math.sqrt(50))
    torch.manual_seed(5)
    w = init.kaiming_uniform(torch.empty(7, 50), a=math.sqrt(5))
    b = init.uniform_bias(torch.empty(7), 50)
    torch.testing.assert_close(w, lin.weight.detach(), rtol=0, atol=0)
    torch.testing.assert_close(b, expected_bias, rtol=0, atol=0)


def test_explicit_fans_set_the_bound() -> None:
    # A (in, out)-laid-out weight: give the fans explicitly. Bound √(6/(100+300)) = 0.1225.
    t = init.xavier_uniform(torch.empty(100, 300), fan_in=100, fan_out=300, generator=_gen())
    bound = math.sqrt(6 / 400)
    assert t.abs().max() <= bound and t.abs().max() > 0.95 * bound
    t = init.kaiming_normal(torch.empty(20000), fan=50, nonlinearity="relu", generator=_gen())
    assert abs(float(t.std()) - math.sqrt(2 / 50)) < 0.01


def test_statistics_of_trunc_normal_and_orthogonality() -> None:
    t = init.trunc_normal(torch.empty(50000), std=1.0, a=-1.0, b=1.0, generator=_gen())
    assert t.min() >= -1.0 and t.max() <= 1.0
    assert abs(float(t.mean())) < 0.02
    q = init.orthogonal(torch.empty(16, 40), generator=_gen())
    torch.testing.assert_close(q @ q.T, torch.eye(16), atol=1e-5, rtol=0)


def test_constant_zeros_and_gain() -> None:
    assert torch.equal(init.constant(torch.empty(3), 2.5), torch.full((3,), 2.5))
    assert torch.equal(init.zeros(torch.ones(2, 2)), torch.zeros(2, 2))
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.fans(torch.empty(SHAPE)) == (288, 576)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: init.xavier_uniform(torch.empty(5)), ">= 2 dims"),
        (lambda: init.kaiming_uniform(torch.empty(3, 3), mode="fan_avg"), "mode='fan_avg'"),
        (lambda: init.kaiming_normal(torch.empty(3, 3), nonlinearity="swish"), "swish"),
        (lambda: init.xavier_normal(torch.empty(3, 3), fan_in=0), "fan_in must be >= 1"),
        (lambda: init.orthogonal(torch.empty(4)), ">= 2 dims"),
        (lambda: init.trunc_normal(torch.empty(4), a=1.0, b=-1.0), "need a < b"),
        (lambda: init.trunc_normal(torch.empty(4), std=0.0), "std must be > 0"),
        (lambda: init.uniform(torch.empty(4), 1.0, 0.0), "low <= high"),
        (lambda: init.normal(torch.empty(4), std=-1.0), "std must be >= 0"),
        (lambda: init.uniform_bias(torch.empty(4), 0), "fan_in must be >= 1"),
    ],
)
def test_bad_arguments(call, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        call()
