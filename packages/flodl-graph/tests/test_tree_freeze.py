"""Parameters by path, freeze/thaw and its effect on gradients and optimizer groups.

The tree under test (``tree``, ``model``, ``x``) is built in conftest.py.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_core import PathError
from flodl_core.optim import Adam
from flodl_graph import FlowBuilder


def _grads(model, x) -> dict[str, bool]:
    model.zero_grad(set_to_none=True)
    model(x).sum().backward()
    return {n: p.grad is not None for n, p in model.named_parameters()}


def test_parameters_at_subgraph_and_tag(model) -> None:
    scan = model.subgraph("encoder.scan")
    assert model.parameters_at("encoder.scan") == list(scan.parameters())
    assert len(model.parameters_at("encoder")) == 4
    head = model.parameters_at("head")
    assert [p.shape for p in head] == [torch.Size([2, 3]), torch.Size([2])]
    assert model.parameters_at("score") == []  # a module without parameters
    assert model.parameters_at("encoder.scan.hidden") == []  # Tanh


def test_named_parameters_at_use_the_targets_namespace(model) -> None:
    scan = model.subgraph("encoder.scan")
    named = model.named_parameters_at("encoder.scan")
    assert [n for n, _ in named] == [n for n, _ in scan.named_parameters()]
    root = dict(model.named_parameters())
    # The subgraph's own names, prefixed with the path, are the root's state_dict names.
    for n, p in named:
        assert root[f"encoder.scan.{n}"] is p
    assert [n for n, _ in model.named_parameters_at("head")] == ["head.weight", "head.bias"]
    assert model.named_buffers_at("encoder") == []


def test_named_buffers_at() -> None:
    g = FlowBuilder(nn.BatchNorm1d(3)).tag("bn").build()
    names = [n for n, _ in g.named_buffers_at("bn")]
    assert names == ["bn.running_mean", "bn.running_var", "bn.num_batches_tracked"]


def test_freeze_stops_gradients_thaw_restores_them(model, x) -> None:
    assert model.freeze("encoder") == 4
    assert model.is_frozen("encoder") and model.is_frozen("encoder.scan")
    g = _grads(model, x)
    assert {n for n, has in g.items() if has} == {"head.weight", "head.bias"}
    assert model.thaw("encoder.scan") == 2
    assert not model.is_frozen("encoder") and model.is_frozen("encoder.read")
    g = _grads(model, x)
    assert {n for n, has in g.items() if has} == {
        "head.weight",
        "head.bias",
        "encoder.scan._raw.weight",
        "encoder.scan._raw.bias",
    }
    assert model.frozen_parameter_names() == [
        "encoder.read.confidence.weight",
        "encoder.read.confidence.bias",
    ]


def test_freeze_by_tag_and_is_frozen_edge_cases(model) -> None:
    model.freeze("head")
    assert model.is_frozen("head")
    assert not model.is_frozen("score")  # no parameters: never "frozen"
    assert model.freeze("score") == 0
    model.freeze("encoder.scan")
    model.thaw("encoder")
    assert model.frozen_parameter_names() == ["head.weight", "head.bias"]
    # Graph.parameters() still lists frozen parameters (they just get no gradient).
    assert len(list(model.parameters())) == 6


def test_freeze_bad_path_changes_nothing(model) -> None:
    with pytest.raises(PathError):
        model.freeze("encoder.nope")
    assert model.frozen_parameter_names() == []


def test_optimizer_groups_from_paths_torch(model, x) -> None:
    """The seed's phase 2: scan at a low LR, the head at a higher one, read frozen."""
    model.freeze("encoder")
    model.thaw("encoder.scan")
    opt = torch.optim.SGD(
        [
            {"params": model.parameters_at("encoder.scan"), "lr": 1e-3},
            {"params": model.parameters_at("head"), "lr": 1e-1},
        ]
    )
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {}
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    for n, p in model.named_parameters():
        grads[n] = None if p.grad is None else p.grad.clone()
    opt.step()
    for n, p in model.named_parameters():
        lr = 1e-3 if n.startswith("encoder.scan") else 1e-1 if n.startswith("head") else 0.0
        if lr == 0.0:
            assert grads[n] is None and torch.equal(p, before[n])
        else:
            torch.testing.assert_close(p.detach(), before[n] - lr * grads[n])


def test_optimizer_groups_from_paths_flodl_builder(model, x) -> None:
    model.freeze("encoder.read")
    opt = (
        Adam.with_groups()
        .group(model.parameters_at("encoder.scan"), lr=1e-4)
        .group(model.parameters_at("head"), lr=1e-3)
        .build()
    )
    assert [g["lr"] for g in opt.param_groups] == [1e-4, 1e-3]
    read_before = [p.detach().clone() for p in model.parameters_at("encoder.read")]
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
    for p, b in zip(model.parameters_at("encoder.read"), read_before, strict=True):
        assert torch.equal(p, b)


def test_set_training_at(tree) -> None:
    g = FlowBuilder(tree.encoder()).through(nn.Dropout(0.5)).tag("drop").build()
    g.train()
    g.set_training_at("encoder", False)
    assert not g.subgraph("encoder").training
    assert not g.subgraph("encoder.scan").training
    assert g.training
    g.set_training_at("drop", False)
    assert not g.tag_node("drop").module.training
    g.set_training_at("encoder.scan", True)
    assert g.subgraph("encoder.scan").training and not g.subgraph("encoder.read").training
