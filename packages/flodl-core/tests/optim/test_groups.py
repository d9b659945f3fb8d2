"""The group builder: what it accepts and the errors it raises."""

from __future__ import annotations

import pytest
import torch

import flodl_core as fc
from flodl_core import ConfigError


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def test_group_options_and_defaults() -> None:
    m = _model()
    opt = (
        fc.SGD.with_groups(momentum=0.9)
        .group(m[0], lr=1e-3)
        .group([m[2].weight, m[2].bias], lr=1e-2, weight_decay=1e-4, nesterov=True)
        .build()
    )
    g0, g1 = opt.param_groups
    assert (g0["lr"], g0["momentum"], g0["weight_decay"], g0["nesterov"]) == (1e-3, 0.9, 0.0, False)
    assert (g1["lr"], g1["momentum"], g1["weight_decay"], g1["nesterov"]) == (1e-2, 0.9, 1e-4, True)
    assert "param_names" not in g0  # mixed named/unnamed groups: names dropped for torch


def test_named_groups_keep_names() -> None:
    m = _model()
    opt = (
        fc.Adam.with_groups()
        .group(m[0])
        .group({"head.w": m[2].weight})
        .group([("head.b", m[2].bias)])
        .build()
    )
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.param_groups[1]["param_names"] == ["head.w"]
    assert opt.param_groups[2]["lr"] == 1e-3  # the class default when no lr is given


def test_frozen_parameters_are_allowed_and_skipped() -> None:
    m = _model()
    m[0].requires_grad_(False)
    opt = fc.Adam.with_groups().group(m[0], lr=1.0).group(m[2], lr=1e-2).build()
    before = m[0].weight.detach().clone()
    m(torch.randn(3, 4)).sum().backward()
    opt.step()
    assert torch.equal(m[0].weight, before)


@pytest.mark.parametrize(
    ("build", "match"),
    [
        (lambda m: fc.Adam.with_groups().group([]), r"Adam group 0: no parameters"),
        (lambda m: fc.Adam.with_groups().group(torch.nn.ReLU()), "no parameters"),
        (lambda m: fc.Adam.with_groups().group(m[0]).group(m[0].named_parameters()),
         r"Adam group 1: 'weight' is already in group 0; a parameter may belong to one group"),
        (lambda m: fc.SGD.with_groups().group([m[0].weight, m[0].weight]), "listed twice"),
        (lambda m: fc.Adam.with_groups().group(m[0], weight_decy=0.1),
         r"unknown option weight_decy for Adam; valid: .*weight_decay"),
        (lambda m: fc.AdamW.with_groups(beta=(0.9, 0.9)), "unknown option beta for AdamW"),
        (lambda m: fc.Adam.with_groups().build(), r"build\(\) called before any group"),
        (lambda m: fc.Adam.with_groups().group(m[0], lr=-1.0), "lr must be a finite number >= 0"),
        (lambda m: fc.Adam.with_groups(lr=float("nan")), "lr must be a finite number"),
        (lambda m: fc.Adam.with_groups().group([1, 2]), r"item 0 is a int; expected a Parameter"),
        (lambda m: fc.Adam.with_groups().group("weights"), "got str"),
        (lambda m: fc.Adam.with_groups().group(3), "got int"),
        # the optimizer's own checks, which torch runs in its constructor only
        (lambda m: fc.Adam.with_groups().group(m[0], betas=(2.0, 0.9)),
         r"Adam group 0: Invalid beta parameter at index 0: 2\.0"),
        (lambda m: fc.AdamW.with_groups(eps=-1.0).group(m[0]), "Invalid epsilon value: -1.0"),
        (lambda m: fc.SGD.with_groups(lr=0.1).group(m[0]).group(m[2], nesterov=True),
         "SGD group 1: Nesterov momentum requires a momentum"),
    ],
)  # fmt: skip
def test_errors_name_the_group_and_parameter(build, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build(_model())


def test_builder_counts_groups() -> None:
    m = _model()
    b = fc.RMSprop.with_groups(alpha=0.9).group(m[0])
    assert len(b) == 1
    assert isinstance(b.group(m[2]).build(), torch.optim.RMSprop)
