"""GELU (exact and tanh) against the closed-form formulas, values and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from flodl_core import GELU, ConfigError, GeluApprox

X = torch.linspace(-4.0, 4.0, 41, dtype=torch.float64)


def _exact(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def _tanh(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


@pytest.mark.parametrize(
    ("module", "formula"),
    [(GELU(), _exact), (GELU.tanh(), _tanh), (GeluApprox(), _tanh)],
    ids=["exact", "tanh-classmethod", "GeluApprox"],
)
def test_gelu_values_and_gradients_match_formula(module: torch.nn.Module, formula) -> None:
    x = X.clone().requires_grad_(True)
    y = module(x)
    torch.testing.assert_close(y, formula(X), rtol=1e-12, atol=1e-12)
    (g,) = torch.autograd.grad(y.sum(), x)
    xr = X.clone().requires_grad_(True)
    (g_ref,) = torch.autograd.grad(formula(xr).sum(), xr)
    torch.testing.assert_close(g, g_ref, rtol=1e-10, atol=1e-12)


def test_tanh_form_differs_from_exact() -> None:
    assert (GELU()(X) - GELU.tanh()(X)).abs().max() > 1e-5


def test_gelu_keeps_torch_identity() -> None:
    m = GELU.tanh()
    assert isinstance(m, torch.nn.GELU) and m.approximate == "tanh"
    assert isinstance(GeluApprox(), GELU)
    assert m.state_dict() == {}


def test_gelu_rejects_unknown_approximation() -> None:
    with pytest.raises(ConfigError, match="approximate='fast'"):
        GELU("fast")
