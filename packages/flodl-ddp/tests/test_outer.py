"""Outer optimizers: sign conventions against hand-computed two-step sequences, parity with
torch.optim.SGD(nesterov=True), state round trips."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from flodl_core import CheckpointError, ConfigError, load_state_file, save_state_file
from flodl_ddp import DiLoCo, OuterAvg, OuterOptimizer, SlowMo, TorchOuter

# θ_global starts at [1, 2]; window 1 averages to [0.8, 2.2] (Δ1 = θ − avg = [0.2, −0.2]);
# window 2 averages to [0.5, 2.0] from wherever step 1 put θ.
START = [1.0, 2.0]
AVG1 = [0.8, 2.2]
AVG2 = [0.5, 2.0]


def two_steps(opt: OuterOptimizer) -> tuple[list[float], list[float]]:
    theta = torch.tensor(START, dtype=torch.float64)
    opt.step([theta], [torch.tensor(AVG1, dtype=torch.float64)])
    first = theta.tolist()
    opt.step([theta], [torch.tensor(AVG2, dtype=torch.float64)])
    return first, theta.tolist()


def test_outer_avg_is_plain_averaging() -> None:
    first, second = two_steps(OuterAvg())
    assert first == pytest.approx(AVG1, abs=1e-15) and second == pytest.approx(AVG2, abs=1e-15)


def test_slowmo_two_steps() -> None:
    first, second = two_steps(SlowMo(lr=1.0, momentum=0.5, inner_lr=0.1))
    # step 1: u = 0.5·0 + Δ1/0.1 = [2, −2]; θ = [1, 2] − 1·0.1·[2, −2] = [0.8, 2.2]
    assert first == pytest.approx([0.8, 2.2], abs=1e-12)
    # step 2: Δ2 = [0.8, 2.2] − [0.5, 2.0] = [0.3, 0.2]; u = 0.5·[2, −2] + [3, 2] = [4, 1];
    # θ = [0.8, 2.2] − 0.1·[4, 1] = [0.4, 2.1]: momentum carries θ past the average
    assert second == pytest.approx([0.4, 2.1], abs=1e-12)


def test_slowmo_slow_lr_and_constant_inner_lr_cancels() -> None:
    first, _ = two_steps(SlowMo(lr=0.5, momentum=0.5, inner_lr=0.1))
    # u = [2, −2]; θ = [1, 2] − 0.5·0.1·[2, −2] = [0.9, 2.1]: half way to the average
    assert first == pytest.approx([0.9, 2.1], abs=1e-12)
    # a constant inner rate cancels: γ = 0.1 and γ = 1 give the same trajectory
    a = two_steps(SlowMo(lr=1.0, momentum=0.5, inner_lr=0.1))
    b = two_steps(SlowMo(lr=1.0, momentum=0.5))
    assert a[1] == pytest.approx(b[1], abs=1e-12)
    # momentum 0, lr 1 is plain averaging
    assert two_steps(SlowMo(momentum=0.0))[1] == pytest.approx(AVG2, abs=1e-12)


def test_diloco_two_steps() -> None:
    first, second = two_steps(DiLoCo())  # lr 0.7, μ 0.9
    # step 1: b = Δ1 = [0.2, −0.2]; θ = θ − 0.7·(Δ1 + 0.9·b) = θ − 1.33·Δ1 = [0.734, 2.266]
    assert first == pytest.approx([0.734, 2.266], abs=1e-12)
    # step 2: Δ2 = [0.734 − 0.5, 2.266 − 2.0] = [0.234, 0.266];
    # b = 0.9·[0.2, −0.2] + Δ2 = [0.414, 0.086];
    # θ = [0.734, 2.266] − 0.7·([0.234, 0.266] + 0.9·[0.414, 0.086])
    #   = [0.734, 2.266] − 0.7·[0.6066, 0.3434] = [0.30938, 2.02562]
    assert second == pytest.approx([0.30938, 2.02562], abs=1e-12)


def _random_run(opt: OuterOptimizer, steps: int, seed: int = 0) -> list[Tensor]:
    gen = torch.Generator().manual_seed(seed)
    params = [torch.randn(3, 4, generator=gen), torch.randn(5, generator=gen)]
    for _ in range(steps):
        averaged = [p + 0.1 * torch.randn(p.shape, generator=gen) for p in params]
        opt.step(params, averaged)
    return params


def _torch_sgd_run(steps: int, seed: int = 0, **sgd: float | bool) -> list[Tensor]:
    """The reference: torch.optim.SGD on Parameters whose .grad is Δ = θ − avg."""
    gen = torch.Generator().manual_seed(seed)
    params = [
        nn.Parameter(torch.randn(3, 4, generator=gen)),
        nn.Parameter(torch.randn(5, generator=gen)),
    ]
    opt = torch.optim.SGD(params, **sgd)  # type: ignore[arg-type]
    for _ in range(steps):
        averaged = [p.detach() + 0.1 * torch.randn(p.shape, generator=gen) for p in params]
        for p, a in zip(params, averaged, strict=True):
            p.grad = p.detach() - a
        opt.step()
    return [p.detach() for p in params]


def test_diloco_equals_torch_nesterov_sgd() -> None:
    ours = _random_run(DiLoCo(lr=0.7, momentum=0.9), steps=6)
    ref = _torch_sgd_run(6, lr=0.7, momentum=0.9, nesterov=True)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_torch_outer_matches_builtins() -> None:
    diloco = TorchOuter(lambda ps: torch.optim.SGD(ps, lr=0.7, momentum=0.9, nesterov=True))
    for a, b in zip(_random_run(diloco, 6), _random_run(DiLoCo(), 6), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    avg = TorchOuter(lambda ps: torch.optim.SGD(ps, lr=1.0))
    for a, b in zip(_random_run(avg, 3), _random_run(OuterAvg(), 3), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert isinstance(diloco.optimizer, torch.optim.SGD)


def test_in_place_and_inputs_untouched() -> None:
    theta = nn.Parameter(torch.tensor(START))
    before = theta.data_ptr()
    avg = torch.tensor(AVG1)
    DiLoCo().step([theta], [avg])
    assert theta.data_ptr() == before and theta.requires_grad
    assert avg.tolist() == pytest.approx(AVG1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: SlowMo(lr=0.9, momentum=0.7, inner_lr=0.05),
        lambda: DiLoCo(),
        lambda: TorchOuter(lambda ps: torch.optim.Adam(ps, lr=0.01)),
        lambda: OuterAvg(),
    ],
)
def test_state_round_trip(make: object, tmp_path: Path) -> None:
    a = make()  # type: ignore[operator]
    gen = torch.Generator().manual_seed(3)
    pa = [torch.randn(4, generator=gen), torch.randn(2, 2, generator=gen)]
    pb = [p.clone() for p in pa]
    avgs = [[p + 0.1 * torch.randn(p.shape, generator=gen) for p in pa] for _ in range(4)]
    for avg in avgs[:2]:
        a.step(pa, avg)
    save_state_file(a, tmp_path / "outer.state")  # tensors + JSON, no pickle
    b = make()  # type: ignore[operator]
    load_state_file(b, tmp_path / "outer.state")
    for p, q in zip(pa, pb, strict=True):
        q.copy_(p)
    for avg in avgs[2:]:
        a.step(pa, avg)
        b.step(pb, avg)
    for p, q in zip(pa, pb, strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_fresh_state_is_empty_momentum() -> None:
    assert DiLoCo().state_dict() == {"momentum_buffer": None}
    assert SlowMo().state_dict() == {"momentum_buffer": None}
    assert TorchOuter(lambda ps: torch.optim.SGD(ps, lr=1.0)).state_dict() == {}


def test_errors() -> None:
    with pytest.raises(ConfigError, match="2 global tensors and 1 averaged"):
        OuterAvg().step([torch.zeros(1), torch.zeros(1)], [torch.zeros(1)])
    with pytest.raises(ConfigError, match=r"tensor 0 has shape \(2,\) globally but \(3,\)"):
        DiLoCo().step([torch.zeros(2)], [torch.zeros(3)])
    with pytest.raises(ConfigError, match="momentum must be a finite number in"):
        DiLoCo(momentum=1.5)
    with pytest.raises(ConfigError, match="lr must be"):
        SlowMo(lr=-1.0)
    with pytest.raises(ConfigError, match="inner_lr must be > 0"):
        SlowMo(inner_lr=0.0)
    with pytest.raises(ConfigError, match="factory must be callable"):
        TorchOuter(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="TorchOuter: factory made a list, not an Optimizer"):
        TorchOuter(lambda ps: ps).step([torch.zeros(1)], [torch.zeros(1)])  # type: ignore[arg-type,return-value]
    with pytest.raises(CheckpointError, match="'momentum_buffer'"):
        DiLoCo().load_state_dict({})
    d = DiLoCo()
    d.load_state_dict({"momentum_buffer": [torch.zeros(3)]})
    with pytest.raises(CheckpointError, match="does not match the model"):
        d.step([torch.zeros(2)], [torch.zeros(2)])
