"""State files: resuming optimizers, schedulers and scalers exactly, and refusing bad files."""

from __future__ import annotations

import gzip
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import flodl_core
from flodl_core import CheckpointError, ConfigError
from flodl_core.checkpoint import (
    CheckpointNotFoundError,
    load_checkpoint,
    load_state_file,
    read_state_file,
    save_checkpoint,
    save_state_file,
)

OPTIMIZERS: dict[str, Callable[[list[dict[str, Any]]], torch.optim.Optimizer]] = {
    "adam-amsgrad": lambda groups: torch.optim.Adam(groups, lr=1e-2, amsgrad=True),
    "adamw": lambda groups: torch.optim.AdamW(groups, lr=1e-2, weight_decay=0.1),
    "sgd-nesterov": lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9, nesterov=True),
}


def groups(model: nn.Module) -> list[dict[str, Any]]:
    # Two groups with their own learning rates: group structure must survive too.
    return [
        {"params": model[0].parameters()},
        {"params": model[2].parameters(), "lr": 3e-3},
    ]


def make_model(seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 4, generator=g)
        loss = (model(x) - x[:, :2]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("suffix", [".fdl", ".fdl.gz"])
def test_resumed_training_matches_uninterrupted(tmp_path: Path, name: str, suffix: str) -> None:
    make_opt = OPTIMIZERS[name]
    model = make_model(0)
    opt = make_opt(groups(model))
    train(model, opt, steps=4, seed=1)
    save_checkpoint(model, tmp_path / "model.fdl")
    save_state_file(opt, tmp_path / f"optim{suffix}")
    train(model, opt, steps=4, seed=2)  # never stopped

    resumed = make_model(99)
    resumed_opt = make_opt(groups(resumed))
    load_checkpoint(resumed, tmp_path / "model.fdl")
    load_state_file(resumed_opt, tmp_path / f"optim{suffix}")
    train(resumed, resumed_opt, steps=4, seed=2)

    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


def test_grad_scaler_round_trip(tmp_path: Path) -> None:
    model = make_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    for i in range(5):
        loss = model(torch.full((2, 4), float(i))).sum()
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    path = tmp_path / "scaler.fdl"
    save_state_file(scaler, path)
    fresh = torch.amp.GradScaler("cpu")
    load_state_file(fresh, path)
    assert fresh.state_dict() == scaler.state_dict()
    assert fresh.get_scale() == scaler.get_scale() > 2.0**10


@pytest.mark.parametrize("kind", ["onecycle", "plateau"])
def test_scheduler_round_trip(tmp_path: Path, kind: str) -> None:
    def make() -> tuple[torch.optim.Optimizer, Any]:
        opt = torch.optim.SGD(make_model(0).parameters(), lr=0.1, momentum=0.9)
        if kind == "onecycle":
            return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=20)
        return opt, torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1)

    def advance(opt: torch.optim.Optimizer, sched: Any, steps: int) -> list[float]:
        lrs = []
        for i in range(steps):
            opt.step()
            sched.step(*([1.0 + (i % 2)] if kind == "plateau" else []))
            lrs.append(opt.param_groups[0]["lr"])
        return lrs

    opt, sched = make()
    advance(opt, sched, 5)
    save_state_file(sched, tmp_path / "sched.fdl")
    save_state_file(opt, tmp_path / "opt.fdl")
    expected = advance(opt, sched, 5)

    opt2, sched2 = make()
    load_state_file(opt2, tmp_path / "opt.fdl")
    load_state_file(sched2, tmp_path / "sched.fdl")
    assert advance(opt2, sched2, 5) == expected


def test_plateau_keeps_infinite_best(tmp_path: Path) -> None:
    opt = torch.optim.SGD(make_model(0).parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    save_state_file(sched, tmp_path / "p.fdl")
    _, state = read_state_file(tmp_path / "p.fdl")
    assert state["best"] == float("inf") and state == sched.state_dict()


def test_kind_mismatch_is_refused(tmp_path: Path) -> None:
    model = make_model(0)
    adam = torch.optim.Adam(model.parameters())
    train(model, adam, 1, 0)
    save_state_file(adam, tmp_path / "adam.fdl")
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    before = sgd.state_dict()
    with pytest.raises(CheckpointError, match="holds Adam state; cannot load it into SGD"):
        load_state_file(sgd, tmp_path / "adam.fdl")
    assert sgd.state_dict() == before


def test_parameter_count_mismatch_is_a_checkpoint_error(tmp_path: Path) -> None:
    model = make_model(0)
    opt = torch.optim.Adam(model.parameters())
    save_state_file(opt, tmp_path / "adam.fdl")
    smaller = torch.optim.Adam(model[0].parameters())
    with pytest.raises(CheckpointError, match="Adam refused the state"):
        load_state_file(smaller, tmp_path / "adam.fdl")


def good_file(tmp_path: Path) -> bytes:
    model = make_model(0)
    opt = torch.optim.Adam(model.parameters())
    train(model, opt, 1, 0)
    save_state_file(opt, tmp_path / "good.fdl")
    return (tmp_path / "good.fdl").read_bytes()


@pytest.mark.parametrize("fraction", [0.0, 0.05, 0.2, 0.5, 0.99])
def test_truncated_state_files(tmp_path: Path, fraction: float) -> None:
    data = good_file(tmp_path)
    path = tmp_path / "cut.fdl"
    path.write_bytes(data[: int(len(data) * fraction)])
    opt = torch.optim.Adam(make_model(0).parameters())
    with pytest.raises(CheckpointError, match=r"state file .*truncated"):
        load_state_file(opt, path)
    assert opt.state_dict()["state"] == {}


def test_bad_state_files(tmp_path: Path) -> None:
    opt = torch.optim.Adam(make_model(0).parameters())
    ckpt = tmp_path / "model.fdl"
    save_checkpoint(make_model(0), ckpt)
    with pytest.raises(CheckpointError, match=r"not a flodl state file: magic b'FDLC'"):
        load_state_file(opt, ckpt)

    data = bytearray(good_file(tmp_path))
    data[4:8] = struct.pack("<I", 2)
    (tmp_path / "v.fdl").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="unsupported state file version 2"):
        load_state_file(opt, tmp_path / "v.fdl")

    data = bytearray(good_file(tmp_path))
    kind_len = struct.unpack("<I", data[8:12])[0]
    at = 12 + kind_len + 8
    data[at] = ord("[")  # the JSON no longer parses
    (tmp_path / "j.fdl").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="malformed header or JSON structure"):
        load_state_file(opt, tmp_path / "j.fdl")

    (tmp_path / "g.fdl.gz").write_bytes(good_file(tmp_path))
    with pytest.raises(CheckpointError, match="not gzip data"):
        load_state_file(opt, tmp_path / "g.fdl.gz")

    with pytest.raises(CheckpointNotFoundError, match=r"state file not found: .*absent\.fdl"):
        load_state_file(opt, tmp_path / "absent.fdl")
    assert opt.state_dict()["state"] == {}


def test_gzip_state_file_is_gzip(tmp_path: Path) -> None:
    raw = good_file(tmp_path)
    model = make_model(0)
    opt = torch.optim.Adam(model.parameters())
    train(model, opt, 1, 0)
    save_state_file(opt, tmp_path / "s.fdl.gz")
    assert gzip.decompress((tmp_path / "s.fdl.gz").read_bytes()) == raw


def test_objects_without_state_dict_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs an object with state_dict"):
        save_state_file(object(), tmp_path / "x.fdl")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs an object with load_state_dict"):
        load_state_file(object(), tmp_path / "x.fdl")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_unstorable_state_writes_nothing(tmp_path: Path) -> None:
    class Odd:
        def state_dict(self) -> dict[str, Any]:
            return {"fn": print}

    with pytest.raises(CheckpointError, match=r"state\['fn'\] is a builtin_function"):
        save_state_file(Odd(), tmp_path / "odd.fdl")  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_read_state_owns_its_tensors(tmp_path: Path) -> None:
    path = tmp_path / "s.fdl"
    model = make_model(0)
    opt = torch.optim.Adam(model.parameters())
    train(model, opt, 1, 0)
    save_state_file(opt, path)
    _, state = read_state_file(path)
    expected = state["state"][0]["exp_avg"].clone()
    with open(path, "r+b") as f:  # scribble over the file in place, as no flodl writer would
        f.seek(0)
        f.write(b"\x00" * path.stat().st_size)
    assert torch.equal(state["state"][0]["exp_avg"], expected)


@pytest.mark.parametrize("fused", [True, False])
def test_state_of_other_shapes_is_refused(tmp_path: Path, fused: bool) -> None:
    # Same parameter count, other shapes: torch would take the state and fail (or crash, with a
    # fused kernel) at the next step.
    small = nn.Linear(3, 2)
    opt = flodl_core.Adam(small, fused=fused)
    small(torch.randn(4, 3)).sum().backward()
    opt.step()
    save_state_file(opt, tmp_path / "adam.fdl")
    other = flodl_core.Adam(nn.Linear(5, 5), fused=fused)
    before = other.state_dict()
    with pytest.raises(
        CheckpointError, match=r"'exp_avg' of parameter 'weight' has shape \(2, 3\)"
    ):
        load_state_file(other, tmp_path / "adam.fdl")
    assert other.state_dict() == before


def test_factored_state_of_the_same_model_loads(tmp_path: Path) -> None:
    # Adafactor keeps (m, 1) and (1, n) factors for an (m, n) weight: not another model's state.
    torch.manual_seed(0)
    model, x = nn.Linear(4, 3), torch.randn(8, 4)
    opt = torch.optim.Adafactor(model.parameters(), lr=0.01)
    model(x).square().sum().backward()
    opt.step()
    save_state_file(opt, tmp_path / "adafactor.fdl")
    twin = nn.Linear(4, 3)
    twin.load_state_dict(model.state_dict())
    resumed = torch.optim.Adafactor(twin.parameters(), lr=0.01)
    load_state_file(resumed, tmp_path / "adafactor.fdl")
    assert tuple(resumed.state[twin.weight]["row_var"].shape) == (3, 1)
    for m, o in ((model, opt), (twin, resumed)):
        o.zero_grad()
        m(x).square().sum().backward()
        o.step()
    assert torch.equal(model.weight, twin.weight)
