"""Warmup, Plateau, MinOf and driving optimizers with apply / LambdaLR."""

from __future__ import annotations

import pytest
import torch
from torch.optim import lr_scheduler as tls

import flodl_core as fc
from flodl_core import ConfigError


def test_warmup_ramp_then_inner_with_restarted_clock() -> None:
    inner = fc.Cosine(0.1, total=90, min_lr=0.001)
    s = fc.Warmup(inner, 10)
    assert s.target == 0.1 and s.peak_lr == 0.1
    assert [s.lr(i) for i in range(10)] == pytest.approx([0.1 * (i + 1) / 10 for i in range(10)])
    assert s.lr(0) > 0  # never exactly zero
    assert [s.lr(10 + i) for i in range(100)] == [inner.lr(i) for i in range(100)]


def test_warmup_explicit_target_and_zero_steps() -> None:
    s = fc.Warmup(fc.StepDecay(0.1, 5), 4, target=0.2)
    assert s.lr(3) == pytest.approx(0.2) and s.lr(4) == 0.1
    assert fc.Warmup(fc.Exponential(0.1, 0.5), 0).lr(1) == pytest.approx(0.05)
    with pytest.raises(ConfigError, match="inner must be a Scheduler"):
        fc.Warmup(0.1, 5)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="warmup_steps must be an int >= 0"):
        fc.Warmup(fc.Exponential(0.1, 0.5), -1)


@pytest.mark.parametrize(
    ("patience", "cooldown", "mode"), [(0, 0, "min"), (2, 0, "min"), (3, 2, "min"), (1, 1, "max")]
)
def test_plateau_matches_reduce_lr_on_plateau(patience: int, cooldown: int, mode: str) -> None:
    g = torch.Generator().manual_seed(3)
    # A noisy, mostly flat metric with repeats (ties never count as improvements).
    metrics = [round(float(v), 1) for v in 1.0 + 0.3 * torch.rand(120, generator=g)]
    metrics[40:50] = [0.5] * 10
    ours = fc.Plateau(0.1, patience=patience, factor=0.5, min_lr=1e-3, mode=mode,
                      cooldown=cooldown)  # fmt: skip
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    ref = tls.ReduceLROnPlateau(opt, mode=mode, factor=0.5, patience=patience, threshold=0.0,
                                threshold_mode="rel", cooldown=cooldown, min_lr=1e-3)  # fmt: skip
    for m in metrics:
        ref.step(m)
        assert ours.observe(m) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
    assert ours.lr() < 0.1  # it did reduce


def test_plateau_rule_by_hand() -> None:
    p = fc.Plateau(1.0, patience=2, factor=0.5, min_lr=0.2)
    # Improvements must be strict; after more than `patience` bad observations: reduce.
    lrs = [p.observe(m) for m in [3.0, 2.0, 2.0, 2.5, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]
    assert lrs == [1, 1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.2]
    assert p.best == 1.0
    p.reset()
    assert p.lr() == 1.0 and p.num_bad == 0


def test_plateau_state_round_trip_and_errors() -> None:
    p = fc.Plateau(1.0, patience=0, factor=0.1)
    p.observe(1.0)
    p.observe(2.0)
    q = fc.Plateau(1.0, patience=0, factor=0.1)
    q.load_state_dict(p.state_dict())
    assert q.state_dict() == p.state_dict() and q.lr() == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="missing keys"):
        q.load_state_dict({"best": 1.0})
    for factor in (1.0, float("nan"), "0.5"):
        with pytest.raises(ConfigError, match=r"Plateau: factor must be in \(0, 1\)"):
            fc.Plateau(0.1, factor=factor)  # type: ignore[arg-type]
    # It would never reduce: each reduction is clamped back up to min_lr, above the lr.
    with pytest.raises(ConfigError, match=r"min_lr 0\.5 is above base_lr 0\.1"):
        fc.Plateau(0.1, min_lr=0.5)
    with pytest.raises(ConfigError, match="mode='low'"):
        fc.Plateau(0.1, mode="low")
    with pytest.raises(ConfigError, match="patience must be an int >= 0"):
        fc.Plateau(0.1, patience=-1)


def test_min_of_warmup_cosine_and_plateau() -> None:
    sched = fc.Warmup(fc.Cosine(1e-2, total=100, min_lr=1e-4), 10)
    plateau = fc.Plateau(1e-2, patience=0, factor=0.1)
    combined = fc.MinOf(sched, plateau)
    assert combined.lr(50) == sched.lr(50)
    plateau.observe(1.0)
    plateau.observe(1.0)  # no improvement, patience 0 -> 1e-3
    assert combined.lr(0) == sched.lr(0) == pytest.approx(1e-3)  # warmup is lower still
    assert combined.lr(12) == pytest.approx(1e-3)
    assert combined.peak_lr == 1e-2
    state = combined.state_dict()
    assert list(state) == ["1"]
    fresh = fc.MinOf(sched, fc.Plateau(1e-2, patience=0, factor=0.1))
    fresh.load_state_dict(state)
    assert fresh.lr(12) == pytest.approx(1e-3)
    with pytest.raises(ConfigError, match="at least one"):
        fc.MinOf()
    with pytest.raises(ConfigError, match="argument 1 is a float"):
        fc.MinOf(sched, 0.1)  # type: ignore[arg-type]


def test_min_of_refuses_a_state_of_other_members_and_loads_all_or_nothing() -> None:
    first, second = fc.Plateau(1e-2, patience=0), fc.Plateau(1e-2, patience=0)
    combined = fc.MinOf(fc.Cosine(1e-2, total=10), first, second)
    before = combined.state_dict()
    assert list(before) == ["1", "2"]
    for bad in ({"1": before["1"]}, {**before, "x": {}}, {"0": {}, "1": {}, "2": {}}, [1]):
        with pytest.raises(ConfigError, match=r"expected the states of members \['1', '2'\]"):
            combined.load_state_dict(bad)  # type: ignore[arg-type]
    # the second member's state is broken: the first, already loaded, is put back
    half = {"1": {**before["1"], "current_lr": 5e-3}, "2": {"current_lr": 1.0}}
    with pytest.raises(ConfigError, match="missing keys"):
        combined.load_state_dict(half)
    assert combined.state_dict() == before


def test_apply_keeps_group_ratios() -> None:
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    opt = fc.AdamW.with_groups().group(a, lr=1e-4).group(b, lr=1e-3).build()
    sched = fc.Warmup(fc.Cosine(1e-3, total=20), 5)
    for step in range(25):
        lr = sched.apply(opt, step)
        assert lr == sched.lr(step)
        assert opt.group_lrs() == pytest.approx([1e-4 * sched.factor(step), lr])
    assert [g["initial_lr"] for g in opt.param_groups] == [1e-4, 1e-3]


def test_plain_set_lr_idiom_and_lambda_lr_interop() -> None:
    sched = fc.OneCycle(0.1, 50)
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    torch_sched = tls.LambdaLR(opt, sched.factor)
    ours = fc.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    for step in range(50):
        ours.set_lr(sched.lr(step))
        assert opt.param_groups[0]["lr"] == pytest.approx(ours.lr(), rel=1e-12)
        opt.step()
        torch_sched.step()


def test_plateau_apply_scales_from_initial_lr() -> None:
    opt = fc.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.5)
    plateau = fc.Plateau(0.1, patience=0, factor=0.5)
    plateau.observe(1.0)
    plateau.observe(1.0)
    assert plateau.apply(opt) == pytest.approx(0.05)
    assert opt.lr() == pytest.approx(0.25)  # 0.5 · (0.05 / 0.1)
