"""``CudaGraph``: clear refusals everywhere (no CUDA, CPU inputs, bad arguments), and on a GPU
capture/replay parity against the same step run eagerly (inference and training)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from flodl_core import ConfigError, ShapeError
from flodl_graph import CudaGraph, FlowBuilder, Graph


def _mlp() -> Graph:
    torch.manual_seed(0)
    return (
        FlowBuilder(nn.Linear(8, 16))
        .through(nn.GELU())
        .also(nn.Linear(16, 16))
        .through(nn.Linear(16, 4))
        .build()
    )


# --- refusals (run everywhere) -----------------------------------------------------------------


def test_refuses_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"CudaGraph: CUDA graphs need a CUDA device.*eagerly"):
        CudaGraph(_mlp())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"warmup": 0}, "warmup must be an int >= 1"),
        ({"warmup": True}, "warmup must be an int >= 1"),
        ({"capture_error_mode": "loose"}, "one of global, relaxed, thread_local, got .loose."),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        CudaGraph(_mlp(), **kwargs)


def test_fn_must_be_callable() -> None:
    with pytest.raises(ConfigError, match="fn must be callable, got int"):
        CudaGraph(3)  # type: ignore[arg-type]


def test_cpu_inputs_are_refused_before_any_cuda_work(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    step = CudaGraph(_mlp())
    with pytest.raises(ConfigError, match="input 0 is on cpu; CUDA graphs replay CUDA work"):
        step(torch.randn(2, 8))
    with pytest.raises(ConfigError, match="input 0 is a float; every input must be a tensor"):
        step(1.0)  # type: ignore[arg-type]
    assert not step.captured
    with pytest.raises(ConfigError, match="nothing captured yet"):
        step.replay()
    with pytest.raises(ConfigError, match="nothing captured yet"):
        _ = step.static_output


# --- capture and replay (GPU) ------------------------------------------------------------------


@pytest.mark.gpu
def test_inference_replay_matches_eager() -> None:
    model = _mlp().cuda().eval()
    xs = [torch.randn(32, 8, device="cuda") for _ in range(4)]
    with torch.no_grad():
        eager = [model(x) for x in xs]
        step = CudaGraph(model)
        outs = [step(x).clone() for x in xs]
    assert step.captured and step.replays == len(xs) - 1
    for a, b in zip(outs, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ShapeError, match=r"input 0 is \(16, 8\).*captured with \(32, 8\)"):
        step(torch.randn(16, 8, device="cuda"))
    with pytest.raises(ConfigError, match="captured with 1 inputs, called with 2"):
        step(xs[0], xs[0])


@pytest.mark.gpu
@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_training_step_replay_matches_eager(opt_name: str) -> None:
    eager_model = _mlp().cuda()
    graphed_model = copy.deepcopy(eager_model)

    def make_opt(m: nn.Module) -> torch.optim.Optimizer:
        if opt_name == "sgd":
            return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        return torch.optim.Adam(m.parameters(), lr=1e-2, capturable=True)

    def step_of(m: nn.Module, opt: torch.optim.Optimizer):
        def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.mse_loss(m(x), y)
            loss.backward()
            opt.step()
            return loss.detach()

        return step

    eager_step = step_of(eager_model, make_opt(eager_model))
    warmup = 2
    graphed = CudaGraph(step_of(graphed_model, make_opt(graphed_model)), warmup=warmup)
    torch.manual_seed(1)
    batches = [
        (torch.randn(16, 8, device="cuda"), torch.randn(16, 4, device="cuda")) for _ in range(6)
    ]
    # The first call warms up on its batch and then takes the captured step on it too.
    for _ in range(warmup):
        eager_step(*batches[0])
    losses_eager = [eager_step(x, y).item() for x, y in batches]
    losses_graphed = [graphed(x, y).item() for x, y in batches]
    assert losses_graphed == pytest.approx(losses_eager, rel=1e-4, abs=1e-6)
    for a, b in zip(graphed_model.parameters(), eager_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_reset_recaptures_on_new_shapes() -> None:
    model = _mlp().cuda().eval()
    with torch.no_grad():
        step = CudaGraph(model, warmup=1)
        step(torch.randn(4, 8, device="cuda"))
        assert step.pool is not None  # a handle another CudaGraph(pool=...) can share
        step.reset()
        assert not step.captured and step.replays == 0
        x = torch.randn(8, 8, device="cuda")
        torch.testing.assert_close(step(x), model(x), rtol=1e-5, atol=1e-5)
        assert step.static_inputs[0].shape == (8, 8)
