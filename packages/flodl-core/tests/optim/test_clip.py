"""clip_grad_norm / clip_grad_value against torch.nn.utils."""

from __future__ import annotations

import math

import pytest
import torch

import flodl_core as fc
from flodl_core import ConfigError


def _models_with_grads() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Linear(7, 3), torch.nn.Linear(3, 2))
    b = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Linear(7, 3), torch.nn.Linear(3, 2))
    b.load_state_dict(a.state_dict())
    a[2].requires_grad_(False)  # some parameters without gradients
    b[2].requires_grad_(False)
    x = torch.randn(4, 5)
    (a(x) * 10).square().sum().backward()
    (b(x) * 10).square().sum().backward()
    return a, b


@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm_matches_torch(norm_type: float, max_norm: float) -> None:
    a, b = _models_with_grads()
    total = fc.clip_grad_norm(a, max_norm, norm_type)  # a module is accepted
    ref = torch.nn.utils.clip_grad_norm_(b.parameters(), max_norm, norm_type)
    assert isinstance(total, torch.Tensor) and total.dim() == 0
    torch.testing.assert_close(total, ref)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        if pa.grad is not None:
            torch.testing.assert_close(pa.grad, pb.grad)
    grads = [p.grad for p in a.parameters() if p.grad is not None]
    after = torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]), norm_type)
    assert float(after) <= max_norm * (1 + 1e-5) or float(total) <= max_norm


def test_clip_grad_value_matches_torch_and_returns_pre_clip_max() -> None:
    a, b = _models_with_grads()
    expected_max = max(p.grad.abs().max() for p in a.parameters() if p.grad is not None)
    peak = fc.clip_grad_value(list(a.parameters()), 0.25)
    torch.nn.utils.clip_grad_value_(b.parameters(), 0.25)
    torch.testing.assert_close(peak, expected_max)
    assert float(peak) > 0.25  # the fixture's grads do need clipping
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        if pa.grad is not None:
            torch.testing.assert_close(pa.grad, pb.grad)
            assert pa.grad.abs().max() <= 0.25


def test_no_gradients_at_all() -> None:
    m = torch.nn.Linear(2, 2)
    assert float(fc.clip_grad_norm(m, 1.0)) == 0.0
    assert float(fc.clip_grad_value(m, 1.0)) == 0.0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda m: fc.clip_grad_norm(m, -1.0), "max_norm must be a finite number >= 0"),
        (lambda m: fc.clip_grad_norm(m, float("nan")), "max_norm must be"),
        (lambda m: fc.clip_grad_norm(m, 1.0, norm_type=0.0), "norm_type must be > 0"),
        (lambda m: fc.clip_grad_value(m, -0.1), "clip_value must be"),
        (lambda m: fc.clip_grad_norm([1.0], 1.0), "item 0 is a float"),
    ],
)
def test_bad_arguments(call, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        call(torch.nn.Linear(2, 2))
