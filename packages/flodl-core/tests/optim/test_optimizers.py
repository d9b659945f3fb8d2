"""The seven optimizers step exactly like the plain torch classes, with and without groups."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

import flodl_core as fc

CASES: list[tuple[type, type, dict[str, Any]]] = [
    (fc.SGD, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-2, "nesterov": True}),
    (fc.Adam, torch.optim.Adam, {"lr": 1e-2, "weight_decay": 1e-2}),
    (fc.AdamW, torch.optim.AdamW, {"lr": 1e-2, "betas": (0.8, 0.95)}),
    (fc.RMSprop, torch.optim.RMSprop, {"lr": 1e-2, "momentum": 0.5, "centered": True}),
    (fc.Adagrad, torch.optim.Adagrad, {"lr": 1e-1, "lr_decay": 1e-3}),
    (fc.RAdam, torch.optim.RAdam, {"lr": 1e-2, "weight_decay": 1e-3}),
    (fc.NAdam, torch.optim.NAdam, {"lr": 1e-2}),
]
IDS = [c[0].__name__ for c in CASES]
FUSED = {"SGD", "Adam", "AdamW", "Adagrad"}


def _model(seed: int = 0) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(16, 6, generator=g)
        y = torch.randn(16, 3, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def _assert_same_params(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-6, atol=1e-6, msg=f"parameter {name}")


@pytest.mark.parametrize(("ours", "theirs", "kw"), CASES, ids=IDS)
def test_steps_match_torch(ours: type, theirs: type, kw: dict[str, Any]) -> None:
    m1, m2 = _model(), _model()
    o1 = ours(m1.parameters(), **kw)  # a generator: materialised once, not exhausted
    o2 = theirs(m2.parameters(), **kw, foreach=False)  # torch's reference for-loop kernel
    assert isinstance(o1, theirs)
    _train(m1, o1, 1)
    _train(m2, o2, 1)
    _assert_same_params(m1, m2)
    _train(m1, o1, 4)
    _train(m2, o2, 4)
    _assert_same_params(m1, m2)
    assert all(p.grad is not None for p in m1.parameters())
    o1.zero_grad()
    assert all(p.grad is None for p in m1.parameters())  # set to None, as torch does


@pytest.mark.parametrize(("ours", "theirs", "kw"), CASES, ids=IDS)
def test_groups_match_torch_param_groups(ours: type, theirs: type, kw: dict[str, Any]) -> None:
    m1, m2 = _model(), _model()
    lr = kw["lr"]
    defaults = {k: v for k, v in kw.items() if k != "lr"}
    o1 = (
        ours.with_groups(**defaults)
        .group(m1[0], lr=lr / 10)
        .group(m1[2].named_parameters(), lr=lr, weight_decay=0.05)
        .build()
    )
    o2 = theirs(
        [
            {"params": m2[0].parameters(), "lr": lr / 10},
            {"params": m2[2].parameters(), "lr": lr, "weight_decay": 0.05},
        ],
        **defaults,
        foreach=False,
    )
    assert len(o1.param_groups) == 2
    assert o1.group_lrs() == pytest.approx([lr / 10, lr])
    _train(m1, o1, 3)
    _train(m2, o2, 3)
    _assert_same_params(m1, m2)


@pytest.mark.parametrize(("ours", "theirs", "kw"), CASES, ids=IDS)
def test_fast_kernel_chosen_on_cpu(ours: type, theirs: type, kw: dict[str, Any]) -> None:
    group = ours(_model().parameters(), **kw).param_groups[0]
    if ours.__name__ in FUSED:
        assert group["fused"] is True and not group["foreach"]
        explicit = ours(_model().parameters(), **kw, fused=False).param_groups[0]
        assert explicit["fused"] is False
    else:  # no fused kernel in torch, and CPU has no foreach kernels: torch's default
        assert not group.get("fused") and group["foreach"] is None


def test_state_dict_moves_to_plain_torch_and_back() -> None:
    m1, m2 = _model(), _model()
    o1 = fc.Adam(m1.parameters(), lr=1e-2)
    _train(m1, o1, 2)
    m2.load_state_dict(m1.state_dict())
    o2 = torch.optim.Adam(m2.parameters(), lr=1e-2)
    # deepcopy: like torch.save/load would; state_dict() hands out the live state tensors.
    o2.load_state_dict(copy.deepcopy(o1.state_dict()))
    _train(m1, o1, 2)
    _train(m2, o2, 2)
    _assert_same_params(m1, m2)


def test_accepts_module_and_named_params() -> None:
    m = _model()
    opt = fc.AdamW(m, lr=1e-3)
    assert opt.param_groups[0]["param_names"] == [n for n, _ in m.named_parameters()]
    opt = fc.SGD(m.named_parameters(), lr=1e-3)
    assert len(opt.param_groups[0]["params"]) == 4


def test_torch_schedulers_drive_flodl_optimizers() -> None:
    opt = fc.SGD(_model().parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for _ in range(4):
        opt.step()
        sched.step()
    assert opt.lr() == pytest.approx(0.25)


def test_sparse_gradients_need_fused_off() -> None:
    emb = torch.nn.Embedding(10, 4, sparse=True)
    opt = fc.SGD(emb.parameters(), lr=0.1, fused=False)
    emb(torch.tensor([1, 2])).sum().backward()
    opt.step()
    assert opt.param_groups[0]["fused"] is False


def test_bare_tensor_is_a_clear_error() -> None:
    with pytest.raises(fc.ConfigError, match=r"wrap it as \[t\]"):
        fc.Adam(torch.nn.Parameter(torch.zeros(3)))


@pytest.mark.parametrize("lr", [float("nan"), float("inf"), -1.0, "1e-3"])
@pytest.mark.parametrize("cls", [c[0] for c in CASES], ids=IDS)
def test_bad_lr_is_refused_by_name(cls: type, lr: Any) -> None:
    # torch's SGD takes NaN and every class takes inf: NaN weights after the first step.
    with pytest.raises(fc.ConfigError, match=f"{cls.__name__}: lr must be a finite number >= 0"):
        cls(_model(), lr=lr)


def test_tensor_lr_is_still_accepted() -> None:
    opt = fc.Adam(_model(), lr=torch.tensor(1e-2))
    assert opt.lr() == pytest.approx(1e-2)


@pytest.mark.gpu
def test_fused_on_cuda_matches_for_loop() -> None:
    m1, m2 = _model().cuda(), _model().cuda()
    o1 = fc.AdamW(m1.parameters(), lr=1e-2)
    assert o1.param_groups[0]["fused"] is True
    o2 = torch.optim.AdamW(m2.parameters(), lr=1e-2, foreach=False)
    g = torch.Generator(device="cuda").manual_seed(1)
    for _ in range(3):
        x = torch.randn(16, 6, device="cuda", generator=g)  # the same batch for both
        for m, o in ((m1, o1), (m2, o2)):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    # The fused kernel rounds in another order than the for-loop: float32's default tolerance
    # (rtol 1.3e-6, atol 1e-5), not the bit-level bound of the CPU comparisons.
    for (name, pa), (_, pb) in zip(m1.named_parameters(), m2.named_parameters(), strict=True):
        torch.testing.assert_close(pa, pb, msg=lambda m, n=name: f"parameter {n}: {m}")
