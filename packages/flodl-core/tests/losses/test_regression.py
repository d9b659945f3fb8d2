"""Regression losses against torch.nn.functional (float64, torch's default tolerance)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import flodl_core as fc
from flodl_core import ConfigError, ShapeError

REDUCTIONS = ["mean", "sum", "none"]


def _pair(*shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(*shape, dtype=torch.float64, generator=g)
    b = torch.randn(*shape, dtype=torch.float64, generator=g)
    return a, b


def _check_same(ours, ref, *args: torch.Tensor, **kwargs) -> None:
    """Values, and gradients with respect to the prediction, of ``ours`` equal ``ref``."""
    pred, rest = args[0], args[1:]
    x, r = pred.clone().requires_grad_(True), pred.clone().requires_grad_(True)
    y, yr = ours(x, *rest, **kwargs), ref(r, *rest, **kwargs)
    torch.testing.assert_close(y, yr)
    y.sum().backward()
    yr.sum().backward()
    torch.testing.assert_close(x.grad, r.grad)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_l1_smooth_l1_match_torch(reduction: str) -> None:
    a, b = _pair(4, 5)
    _check_same(fc.mse_loss, F.mse_loss, a, b, reduction=reduction)
    _check_same(fc.l1_loss, F.l1_loss, a, b, reduction=reduction)
    _check_same(fc.smooth_l1_loss, F.smooth_l1_loss, a, b, beta=0.5, reduction=reduction)


@pytest.mark.parametrize("log_input", [True, False])
@pytest.mark.parametrize("full", [True, False])
def test_poisson_nll_matches_torch(log_input: bool, full: bool) -> None:
    rate, _ = _pair(3, 4)
    rate = rate if log_input else rate.abs() + 0.1
    counts = torch.poisson(torch.full((3, 4), 3.0, dtype=torch.float64))
    _check_same(
        fc.poisson_nll_loss, F.poisson_nll_loss, rate, counts, log_input=log_input, full=full
    )


def test_mse_known_value() -> None:
    assert float(fc.mse_loss(torch.tensor([2.0, 3.0, 4.0]), torch.tensor([1.0, 2.0, 3.0]))) == 1.0


@pytest.mark.parametrize("loss", [fc.mse_loss, fc.l1_loss, fc.smooth_l1_loss, fc.poisson_nll_loss])
def test_shape_mismatch_is_an_error_not_a_broadcast(loss) -> None:
    with pytest.raises(ShapeError, match=r"target has shape \(8,\), expected .* \(8, 1\)"):
        loss(torch.zeros(8, 1), torch.zeros(8))


@pytest.mark.parametrize("beta", [0.0, -1.0, float("inf")])
def test_smooth_l1_beta_must_be_positive(beta: float) -> None:
    with pytest.raises(ConfigError, match="smooth_l1_loss: beta must be"):
        fc.smooth_l1_loss(torch.zeros(2), torch.zeros(2), beta=beta)


def test_bad_reduction_and_eps() -> None:
    with pytest.raises(ConfigError, match="mse_loss: reduction='avg'"):
        fc.mse_loss(torch.zeros(2), torch.zeros(2), reduction="avg")
    with pytest.raises(ConfigError, match="eps must be"):
        fc.poisson_nll_loss(torch.zeros(2), torch.zeros(2), eps=-1.0)


@pytest.mark.parametrize(
    ("pred", "target", "wrong", "got"),
    [
        ([1.0, 2.0], torch.zeros(2), 0, "list"),
        (torch.zeros(2), 1.0, 1, "float"),
        (np.zeros(2), np.zeros(2), 0, "ndarray"),
    ],
)
@pytest.mark.parametrize("loss", [fc.mse_loss, fc.l1_loss, fc.smooth_l1_loss, fc.poisson_nll_loss])
def test_non_tensor_arguments_are_named(loss, pred, target, wrong: int, got: str) -> None:
    name = (("input" if loss is fc.poisson_nll_loss else "pred"), "target")[wrong]
    with pytest.raises(
        TypeError, match=f"{loss.__name__}: {name} must be a torch.Tensor, got {got}"
    ):
        loss(pred, target)
