"""The device warm-up before a run's clock: no randomness drawn, the model untouched."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_ddp._warmup import warm_up


def _conv_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.Linear(8, 1))


def _snapshot(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_cpu_is_a_no_op() -> None:
    model = _conv_model()
    before, rng = _snapshot(model), torch.get_rng_state()
    warm_up(torch.device("cpu"), model)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.gpu
def test_cuda_warm_up_draws_nothing_and_leaves_the_model_alone() -> None:
    device = torch.device("cuda:0")
    model = _conv_model().to(device)
    before = _snapshot(model)
    rng, cuda_rng = torch.get_rng_state(), torch.cuda.get_rng_state(device)
    warm_up(device, model)
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.equal(torch.cuda.get_rng_state(device), cuda_rng)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    model(torch.ones(2, 1, 4, 4, device=device)).sum().backward()  # the handles it made work
    assert all(p.grad is not None for p in model.parameters())
