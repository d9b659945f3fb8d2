"""set_lr / set_group_lr / scale_lr / lr / group_lr on flodl optimizers."""

from __future__ import annotations

import pytest
import torch

import flodl_core as fc
from flodl_core import ConfigError, GroupIndexError


def _opt() -> fc.Adam:
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    return fc.Adam.with_groups().group(a, lr=1e-3).group(b, lr=1e-2).build()


def test_set_scale_and_read() -> None:
    opt = _opt()
    assert opt.lr() == 1e-3 and opt.group_lr(1) == 1e-2
    opt.scale_lr(0.5)
    assert opt.group_lrs() == pytest.approx([5e-4, 5e-3])
    opt.set_group_lr(1, 0.2)
    assert opt.group_lrs() == pytest.approx([5e-4, 0.2])
    opt.set_lr(0.01)  # overwrites every group, as in the original
    assert opt.group_lrs() == [0.01, 0.01]


def test_tensor_lr_is_updated_in_place() -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    lr = torch.tensor(0.1)
    opt = fc.Adam([p], lr=lr)
    opt.set_lr(0.05)
    assert opt.param_groups[0]["lr"] is lr and float(lr) == pytest.approx(0.05)
    opt.scale_lr(2.0)
    assert opt.lr() == pytest.approx(0.1)


@pytest.mark.parametrize("index", [2, -1, 1.0, True, "0"])
def test_group_index_out_of_range(index) -> None:
    opt = _opt()
    with pytest.raises(GroupIndexError, match="group index"):
        opt.set_group_lr(index, 0.1)
    with pytest.raises(IndexError):  # also an IndexError, for generic handlers
        opt.group_lr(index)


def test_message_gives_valid_range() -> None:
    with pytest.raises(GroupIndexError, match=r"has 2 parameter groups \(valid: 0\.\.1\)"):
        _opt().group_lr(5)


@pytest.mark.parametrize("bad", [-0.1, float("inf"), float("nan"), "fast"])
def test_bad_lr_values(bad) -> None:
    opt = _opt()
    with pytest.raises(ConfigError, match="lr"):
        opt.set_lr(bad)
    with pytest.raises(ConfigError, match="lr"):
        opt.scale_lr(bad)
    assert opt.group_lrs() == [1e-3, 1e-2]  # a rejected call changes nothing
