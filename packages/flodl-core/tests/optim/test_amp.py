"""GradScaler / autocast re-exports and cast_parameters."""

from __future__ import annotations

import pytest
import torch

import flodl_core as fc
from flodl_core import ConfigError


def test_reexports_are_torch_amp() -> None:
    assert fc.GradScaler is torch.amp.GradScaler
    assert fc.autocast is torch.amp.autocast
    scaler = fc.GradScaler("cpu")
    # The original's defaults: 65536, x2 every 2000 finite steps, x0.5 on overflow.
    assert (scaler.get_scale(), scaler.get_growth_interval()) == (65536.0, 2000)
    assert (scaler.get_growth_factor(), scaler.get_backoff_factor()) == (2.0, 0.5)


def test_scaler_skips_a_step_with_inf_grads_and_backs_off() -> None:
    p = torch.nn.Parameter(torch.ones(3))
    opt = fc.SGD([p], lr=0.1)  # fused on CPU: the scaler hands it grad_scale/found_inf
    scaler = fc.GradScaler("cpu", init_scale=8.0)
    scaler.scale((p * torch.tensor([1.0, float("inf"), 1.0])).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert torch.equal(p.detach(), torch.ones(3)) and scaler.get_scale() == 4.0
    opt.zero_grad()
    scaler.scale(p.sum()).backward()
    scaler.step(opt)
    scaler.update()
    torch.testing.assert_close(p.detach(), torch.full((3,), 0.9))  # unscaled gradient of 1


def test_autocast_bf16_on_cpu() -> None:
    lin = torch.nn.Linear(4, 4)
    with fc.autocast("cpu", dtype=torch.bfloat16):
        y = lin(torch.randn(2, 4))
    assert y.dtype == torch.bfloat16


def test_cast_parameters_module_includes_buffers() -> None:
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    assert fc.cast_parameters(m, torch.float64) is m
    assert all(p.dtype == torch.float64 for p in m.parameters())
    assert m[1].running_mean.dtype == torch.float64
    assert m[1].num_batches_tracked.dtype == torch.long  # integers untouched


def test_cast_parameters_loose_params_and_grads() -> None:
    lin = torch.nn.Linear(3, 2)
    lin(torch.randn(1, 3)).sum().backward()
    w_before = lin.weight.detach().clone()
    params = [lin.weight, lin.bias]
    assert fc.cast_parameters(params, torch.bfloat16) is params
    assert lin.weight.dtype == torch.bfloat16 and lin.weight.grad.dtype == torch.bfloat16
    assert isinstance(lin.weight, torch.nn.Parameter)
    torch.testing.assert_close(lin.weight.float(), w_before, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("dtype", [torch.int32, "float16", torch.bool])
def test_cast_parameters_rejects_non_float(dtype) -> None:
    with pytest.raises(ConfigError, match=r"floating torch\.dtype"):
        fc.cast_parameters(torch.nn.Linear(2, 2), dtype)
