"""Step schedules against torch.optim.lr_scheduler over many steps, and against formulas."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from torch.optim import lr_scheduler as tls

import flodl_core as fc
from flodl_core import ConfigError

STEPS = 300
REL = 1e-9  # torch's chained/recursive forms differ from the closed forms by rounding only


def _torch_lrs(base: float, make: Callable[[torch.optim.Optimizer], object]) -> list[float]:
    """The lr torch's scheduler gives at steps 0..STEPS-1."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base, momentum=0.9)
    sched = make(opt)
    lrs = []
    for _ in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()  # type: ignore[attr-defined]
    return lrs


def _ours(s: fc.Scheduler, steps: int = STEPS) -> list[float]:
    return [s.lr(i) for i in range(steps)]


@pytest.mark.parametrize(
    ("ours", "base", "make"),
    [
        (fc.StepDecay(0.1, 30, 0.5), 0.1, lambda o: tls.StepLR(o, 30, 0.5)),
        (fc.Exponential(0.1, 0.99), 0.1, lambda o: tls.ExponentialLR(o, 0.99)),
        (fc.MultiStep(0.1, [200, 50, 120, 120], 0.3), 0.1,
         lambda o: tls.MultiStepLR(o, [50, 120, 120, 200], 0.3)),
        (fc.Cosine(0.1, total=STEPS, min_lr=1e-3), 0.1,
         lambda o: tls.CosineAnnealingLR(o, T_max=STEPS, eta_min=1e-3)),
        (fc.OneCycle(0.1, STEPS, warmup_frac=0.25, warmup="cos", final_div_factor=1e4), None,
         lambda o: tls.OneCycleLR(o, 0.1, total_steps=STEPS, pct_start=0.25,
                                  cycle_momentum=False)),
        (fc.OneCycle(0.1, STEPS, warmup="linear", anneal="linear", div_factor=10,
                     final_div_factor=100), None,
         lambda o: tls.OneCycleLR(o, 0.1, total_steps=STEPS, pct_start=0.3,
                                  anneal_strategy="linear", div_factor=10,
                                  final_div_factor=100, cycle_momentum=False)),
        (fc.Cyclic(0.01, 0.1, 20), 0.01,
         lambda o: tls.CyclicLR(o, 0.01, 0.1, step_size_up=20, cycle_momentum=False)),
        (fc.Cyclic.asymmetric(0.01, 0.1, 7, 23), 0.01,
         lambda o: tls.CyclicLR(o, 0.01, 0.1, step_size_up=7, step_size_down=23,
                                cycle_momentum=False)),
        (fc.Cyclic(0.01, 0.1, 15, mode="triangular2"), 0.01,
         lambda o: tls.CyclicLR(o, 0.01, 0.1, step_size_up=15, mode="triangular2",
                                cycle_momentum=False)),
        (fc.Cyclic(0.01, 0.1, 15, 10, mode="exp_range", gamma=0.995), 0.01,
         lambda o: tls.CyclicLR(o, 0.01, 0.1, step_size_up=15, step_size_down=10,
                                mode="exp_range", gamma=0.995, cycle_momentum=False)),
    ],
    ids=["step", "exponential", "multistep", "cosine", "onecycle-torch", "onecycle-linear",
         "cyclic", "cyclic-asymmetric", "cyclic-triangular2", "cyclic-exp-range"],
)  # fmt: skip
def test_matches_torch_scheduler(ours: fc.Scheduler, base: float | None, make) -> None:
    expected = _torch_lrs(base if base is not None else 0.1, make)
    assert _ours(ours) == pytest.approx(expected, rel=REL, abs=1e-15)


def test_cosine_holds_min_after_total() -> None:
    s = fc.Cosine(1.0, total=10, min_lr=0.1)
    assert s.lr(5) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 2)))
    assert s.lr(10) == s.lr(10_000) == pytest.approx(0.1)


def test_onecycle_default_is_the_original_shape() -> None:
    s = fc.OneCycle(0.01, 100)  # linear rise, cosine fall, final = max/25
    assert s.lr(0) == pytest.approx(0.01 / 25)
    assert s.lr(29) == pytest.approx(0.01)  # peak at warmup_frac·total − 1
    assert s.lr(15) == pytest.approx(0.01 / 25 + (0.01 - 0.01 / 25) * 15 / 29)
    assert s.lr(99) == s.lr(500) == pytest.approx(0.01 / 25)
    rising = [s.lr(i) for i in range(30)]
    assert rising == sorted(rising)


def test_cyclic_triangular_formula() -> None:
    s = fc.Cyclic(0.001, 0.01, 10)
    assert [s.lr(i) for i in (0, 5, 10, 15, 20, 25)] == pytest.approx(
        [0.001, 0.0055, 0.01, 0.0055, 0.001, 0.0055]
    )


def test_multistep_sorts_and_peak_lrs() -> None:
    s = fc.MultiStep(1.0, [30, 10], 0.1)
    assert s.milestones == (10, 30)
    assert [s.lr(i) for i in (9, 10, 29, 30)] == pytest.approx([1.0, 0.1, 0.1, 0.01])
    assert s.peak_lr == 1.0
    assert fc.Cyclic(0.1, 0.5, 3).peak_lr == 0.5
    assert fc.OneCycle(0.3, 10).peak_lr == 0.3


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: fc.StepDecay(0.1, 0), "step_size must be an int >= 1"),
        (lambda: fc.StepDecay(-0.1, 5), "base_lr must be a finite number > 0"),
        (lambda: fc.Exponential(0.1, 0.0), "gamma must be"),
        (lambda: fc.MultiStep(0.1, [10, -1]), "milestone must be an int >= 0"),
        (lambda: fc.Cosine(0.1, total=0), "total must be an int >= 1"),
        (lambda: fc.Cosine(0.1, total=10, min_lr=0.2), "min_lr 0.2 is above base_lr"),
        (lambda: fc.OneCycle(0.1, 10, warmup_frac=0.05), "rising steps"),
        (lambda: fc.OneCycle(0.1, 10, warmup_frac=1.0), "rising steps"),
        (
            lambda: fc.OneCycle(0.1, 10, warmup_frac="0.3"),
            "OneCycle: warmup_frac must be a finite number, got '0.3'",
        ),
        (lambda: fc.OneCycle(0.1, 10, anneal="exp"), "anneal='exp'"),
        (lambda: fc.Cyclic(0.1, 0.01, 5), "max_lr 0.01 is below base_lr"),
        (lambda: fc.Cyclic(0.01, 0.1, 5, mode="sine"), "mode='sine'"),
        (lambda: fc.Cyclic(0.01, 0.1, 0), "step_size must be an int >= 1"),
        (lambda: fc.Cosine(0.1, total=10).lr(-1), "step must be an int >= 0"),
        (lambda: fc.StepDecay(0.1, 5).lr(1.5), "step must be an int"),
    ],
)
def test_bad_arguments(make, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


def test_schedules_are_immutable_values() -> None:
    s = fc.Cosine(0.1, total=10)
    assert s == fc.Cosine(0.1, total=10)
    assert repr(s) == "Cosine(base_lr=0.1, total=10, min_lr=0.0)"
    with pytest.raises(AttributeError):
        s.base_lr = 1.0  # type: ignore[misc]
