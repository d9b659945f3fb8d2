"""migrate_optim_state_file: optimizer state follows parameters across renames and reorders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError, ConfigError
from flodl_core.checkpoint import (
    load_checkpoint,
    load_state_file,
    migrate_checkpoint,
    migrate_optim_state_file,
    save_checkpoint,
    save_state_file,
)


class Old(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(4, 8)
        self.decoder = nn.Linear(8, 4)
        self.norm = nn.LayerNorm(8)


class New(nn.Module):
    """``encoder`` renamed ``enc`` and moved after ``decoder``; ``norm`` gone; ``head`` added."""

    def __init__(self) -> None:
        super().__init__()
        self.decoder = nn.Linear(8, 4)
        self.enc = nn.Linear(4, 8)
        self.head = nn.Linear(4, 3)


RENAMES = {"encoder.weight": "enc.weight", "encoder.bias": "enc.bias"}


def _step(model: nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    """One optimizer step with seeded gradients on every parameter."""
    g = torch.Generator().manual_seed(seed)
    opt.zero_grad()
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)
    opt.step()


def _trained_old(tmp_path: Path, *, named: bool = True) -> tuple[Old, torch.optim.Adam, Path]:
    torch.manual_seed(0)
    old = Old()
    opt = torch.optim.Adam(old.named_parameters() if named else old.parameters(), lr=0.01)
    for s in range(3):
        _step(old, opt, s)
    path = tmp_path / "old.optim"
    save_state_file(opt, path)
    return old, opt, path


def test_state_follows_renamed_and_moved_parameters_and_steps_like_the_old(
    tmp_path: Path,
) -> None:
    old, old_opt, src = _trained_old(tmp_path)
    save_checkpoint(old, tmp_path / "old.fdl")
    ck = migrate_checkpoint(tmp_path / "old.fdl", tmp_path / "new.fdl", New())
    assert dict(ck.remapped) == RENAMES  # the checkpoint report drives the optimizer migration
    new = New()
    load_checkpoint(new, tmp_path / "new.fdl", strict=False)
    new_opt = torch.optim.Adam(new.named_parameters(), lr=0.5)

    report = migrate_optim_state_file(src, tmp_path / "new.optim", new_opt, renames=ck)
    assert report.unchanged == ["decoder.weight", "decoder.bias"]
    assert report.remapped == list(RENAMES.items())
    assert report.dropped == ["norm.weight", "norm.bias"]
    assert report.missing == ["head.weight", "head.bias"]

    load_state_file(new_opt, tmp_path / "new.optim")
    assert new_opt.param_groups[0]["lr"] == 0.01  # group options carried from the file
    assert new_opt.param_groups[0]["param_names"] == [n for n, _ in new.named_parameters()]
    st = new_opt.state
    assert not st[new.head.weight]  # a new parameter starts fresh
    old_state = old_opt.state[old.encoder.weight]
    torch.testing.assert_close(st[new.enc.weight]["exp_avg"], old_state["exp_avg"])

    # Same gradients on both sides: the migrated optimizer steps exactly like the old one.
    for a, b in [(old.encoder, new.enc), (old.decoder, new.decoder)]:
        g = torch.Generator().manual_seed(7)
        for p, q in [(a.weight, b.weight), (a.bias, b.bias)]:
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
    old_opt.param_groups[0]["lr"] = new_opt.param_groups[0]["lr"]
    for p in old.norm.parameters():
        p.grad = None
    new.head.weight.grad = new.head.bias.grad = None
    old_opt.step()
    new_opt.step()
    torch.testing.assert_close(new.enc.weight, old.encoder.weight, rtol=0, atol=0)
    torch.testing.assert_close(new.decoder.bias, old.decoder.bias, rtol=0, atol=0)


def test_checkpoint_report_pairs_of_buffers_are_ignored(tmp_path: Path) -> None:
    old = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
    opt = torch.optim.SGD(old.named_parameters(), lr=0.1, momentum=0.9)
    _step(old, opt, 0)
    save_checkpoint(old, tmp_path / "m.fdl")
    save_state_file(opt, tmp_path / "m.optim")
    new = nn.ModuleDict({"fc": nn.Linear(4, 6), "bn": nn.BatchNorm1d(6)})
    ck = migrate_checkpoint(tmp_path / "m.fdl", tmp_path / "n.fdl", new)
    assert ("1.running_mean", "bn.running_mean") in ck.remapped
    new_opt = torch.optim.SGD(new.named_parameters(), lr=0.1, momentum=0.9)
    report = migrate_optim_state_file(
        tmp_path / "m.optim", tmp_path / "n.optim", new_opt, renames=ck
    )
    assert report.remapped == [
        ("0.weight", "fc.weight"),
        ("0.bias", "fc.bias"),
        ("1.weight", "bn.weight"),
        ("1.bias", "bn.bias"),
    ]
    assert report.is_complete
    load_state_file(new_opt, tmp_path / "n.optim")
    torch.testing.assert_close(
        new_opt.state[new["bn"].bias]["momentum_buffer"], opt.state[old[1].bias]["momentum_buffer"]
    )


def test_reordered_groups_keep_state_by_name(tmp_path: Path) -> None:
    old, old_opt, src = _trained_old(tmp_path)
    same = Old()
    named = list(same.named_parameters())[::-1]  # same names, reversed order, two groups
    new_opt = torch.optim.Adam([{"params": named[:2]}, {"params": named[2:], "lr": 0.3}])
    report = migrate_optim_state_file(src, tmp_path / "r.optim.gz", new_opt)
    assert sorted(report.unchanged) == sorted(n for n, _ in named)
    assert not report.remapped and not report.dropped and not report.missing
    load_state_file(new_opt, tmp_path / "r.optim.gz")
    by_name = dict(same.named_parameters())
    for name, p in old.named_parameters():
        torch.testing.assert_close(
            new_opt.state[by_name[name]]["exp_avg_sq"], old_opt.state[p]["exp_avg_sq"]
        )
    # group count changed (1 -> 2): options come from the new optimizer
    assert [g["lr"] for g in new_opt.param_groups] == [0.001, 0.3]


def test_unnamed_files_need_old_names_and_unnamed_optimizers_need_model(tmp_path: Path) -> None:
    old, old_opt, src = _trained_old(tmp_path, named=False)
    new = New()
    new_opt = torch.optim.Adam(new.parameters())
    with pytest.raises(CheckpointError, match=r"does not name its parameters.*old_names="):
        migrate_optim_state_file(src, tmp_path / "n.optim", new_opt, renames=RENAMES)
    names = [n for n, _ in old.named_parameters()]
    with pytest.raises(ConfigError, match=r"does not name its parameters; .* pass model="):
        migrate_optim_state_file(src, tmp_path / "n.optim", new_opt, old_names=names)
    with pytest.raises(ConfigError, match=r"old_names has 2 names but .* 6 parameters"):
        migrate_optim_state_file(src, tmp_path / "n.optim", new_opt, old_names=names[:2])
    report = migrate_optim_state_file(
        src, tmp_path / "n.optim", new_opt, model=new, old_names=names, renames=RENAMES
    )
    assert report.missing == ["head.weight", "head.bias"]
    load_state_file(new_opt, tmp_path / "n.optim")
    torch.testing.assert_close(
        new_opt.state[new.enc.bias]["exp_avg"], old_opt.state[old.encoder.bias]["exp_avg"]
    )
    with pytest.raises(ConfigError, match=r"parameter 0 of optimizer group 0 .* not a parameter"):
        migrate_optim_state_file(src, tmp_path / "x.optim", new_opt, model=Old(), old_names=names)


def test_shape_change_is_refused_unless_dropped(tmp_path: Path) -> None:
    _, _, src = _trained_old(tmp_path)
    wider = Old()
    wider.decoder = nn.Linear(8, 6)  # same names, new shape
    opt = torch.optim.Adam(wider.named_parameters())
    dst = tmp_path / "w.optim"
    dst.write_bytes(b"previous")
    with pytest.raises(CheckpointError, match=r"decoder.weight has shape \(4, 8\) .* \(6, 8\)"):
        migrate_optim_state_file(src, dst, opt)
    assert dst.read_bytes() == b"previous"  # nothing written on error
    assert sorted(os.listdir(tmp_path)) == ["old.optim", "w.optim"]  # and no temp file left
    report = migrate_optim_state_file(
        src, dst, opt, renames={"decoder.weight": None, "decoder.bias": None}
    )
    assert report.dropped == ["decoder.weight", "decoder.bias"]
    assert report.missing == ["decoder.weight", "decoder.bias"]
    load_state_file(opt, dst)
    assert not opt.state[wider.decoder.weight] and opt.state[wider.encoder.weight]


def test_factored_state_migrates(tmp_path: Path) -> None:
    # Adafactor's (m, 1) / (1, n) factors of an (m, n) weight belong to it: not a shape change.
    torch.manual_seed(0)
    old = Old()
    opt = torch.optim.Adafactor(old.named_parameters(), lr=0.01)
    _step(old, opt, 0)
    save_state_file(opt, tmp_path / "old.optim")
    new = New()
    new_opt = torch.optim.Adafactor(new.named_parameters(), lr=0.01)
    migrate_optim_state_file(
        tmp_path / "old.optim", tmp_path / "new.optim", new_opt, renames=RENAMES
    )
    load_state_file(new_opt, tmp_path / "new.optim")
    assert torch.equal(
        new_opt.state[new.enc.weight]["row_var"], opt.state[old.encoder.weight]["row_var"]
    )


def test_clear_errors(tmp_path: Path) -> None:
    _, _, src = _trained_old(tmp_path)
    new = New()
    adam = torch.optim.Adam(new.named_parameters())
    with pytest.raises(CheckpointError, match="holds Adam state; cannot migrate it to SGD"):
        migrate_optim_state_file(src, tmp_path / "a", torch.optim.SGD(new.named_parameters()))
    with pytest.raises(ConfigError, match=r"renames names encodr.weight, not old parameters"):
        migrate_optim_state_file(src, tmp_path / "a", adam, renames={"encodr.weight": "enc.weight"})
    with pytest.raises(ConfigError, match=r"maps to nope, not parameters of the new optimizer"):
        migrate_optim_state_file(src, tmp_path / "a", adam, renames={"encoder.weight": "nope"})
    with pytest.raises(ConfigError, match=r"maps several old names to enc.bias"):
        migrate_optim_state_file(
            src, tmp_path / "a", adam, renames={"encoder.bias": "enc.bias", "norm.bias": "enc.bias"}
        )
    with pytest.raises(CheckpointError, match="same file"):
        migrate_optim_state_file(src, src, adam)
    with pytest.raises(ConfigError, match=r"must be a torch.optim.Optimizer, got dict"):
        migrate_optim_state_file(src, tmp_path / "a", {})  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path)) == ["old.optim"]


class _NotAnOptimizer:
    """State whose file carries the kind ``Adam`` but not an optimizer's layout."""

    def state_dict(self) -> dict[str, object]:
        return {"step": 3}


_NotAnOptimizer.__qualname__ = "Adam"


def test_a_state_file_that_is_not_an_optimizers_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "s.state"
    save_state_file(_NotAnOptimizer(), src)
    opt = torch.optim.Adam(New().named_parameters())
    with pytest.raises(CheckpointError, match="does not hold an optimizer state"):
        migrate_optim_state_file(src, tmp_path / "d", opt)
