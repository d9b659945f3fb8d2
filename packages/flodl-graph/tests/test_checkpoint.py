"""Graph checkpoints: hash embedding, frozen-set restore, subgraph loading and its failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError, ConfigError, PathError
from flodl_core.checkpoint import (
    checkpoint_hash,
    read_checkpoint_metadata,
    save_checkpoint,
    write_checkpoint,
)
from flodl_graph import FlowBuilder, Graph

# --- a small tree: model = encoder(scan -> read) -> head ------------------------------------


def make_scan(width: int = 8) -> Graph:
    return FlowBuilder(nn.Linear(4, width)).through(nn.Tanh()).tag("hidden").label("scan").build()


def make_read(width: int = 8) -> Graph:
    return FlowBuilder(nn.Linear(width, 3)).tag("confidence").label("read").build()


def make_encoder(width: int = 8) -> Graph:
    return FlowBuilder(make_scan(width)).through(make_read(width)).label("encoder").build()


def make_model(width: int = 8) -> Graph:
    return FlowBuilder(make_encoder(width)).through(nn.Linear(3, 2)).tag("head").build()


def _state(g: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in g.state_dict().items()}


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _requires_grad(g: nn.Module) -> dict[str, bool]:
    return {n: p.requires_grad for n, p in g.named_parameters()}


@pytest.fixture
def model() -> Graph:
    torch.manual_seed(0)
    return make_model()


@pytest.mark.parametrize("name", ["m.fdl", "m.fdl.gz"])
def test_round_trip_embeds_and_checks_the_hash(model: Graph, tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    model.save_checkpoint(path, metadata={"note": "epoch 3"})
    assert checkpoint_hash(path) == model.structural_hash()
    meta = read_checkpoint_metadata(path)
    assert meta["note"] == "epoch 3" and meta["flodl.label"] == ""
    assert meta["flodl.hash"] == model.structural_hash()
    torch.manual_seed(1)
    other = make_model()
    report = other.load_checkpoint(path)
    assert report.missing == [] and report.skipped == []
    assert set(report.loaded) == set(model.state_dict())
    _assert_same(_state(other), _state(model))


def test_architecture_mismatch_raises_and_changes_nothing(model: Graph, tmp_path: Path) -> None:
    model.save_checkpoint(tmp_path / "m.fdl")
    wider = make_model(width=16)
    wider.freeze("encoder")
    before, grads = _state(wider), _requires_grad(wider)
    with pytest.raises(CheckpointError, match="architecture mismatch"):
        wider.load_checkpoint(tmp_path / "m.fdl")
    _assert_same(_state(wider), before)
    assert _requires_grad(wider) == grads


def test_architecture_mismatch_says_what_differs(tmp_path: Path) -> None:
    def make(act: nn.Module, width: int = 4) -> Graph:
        return FlowBuilder(nn.Linear(2, width)).through(act).through(nn.Linear(width, 1)).build()

    make(nn.ReLU()).save_checkpoint(tmp_path / "relu.fdl")
    # Same tensors, another activation: the first differing node is named.
    with pytest.raises(CheckpointError, match=r"first differing node \(#1\): file 'relu_2 module"):
        make(nn.GELU()).load_checkpoint(tmp_path / "relu.fdl")
    # Other shapes and names: listed.
    with pytest.raises(CheckpointError) as info:
        make(nn.ReLU(), width=8).load_checkpoint(tmp_path / "relu.fdl")
    msg = str(info.value)
    assert "shape mismatch: linear_1.weight (file [4, 2], model [8, 2])" in msg
    extra = (
        FlowBuilder(nn.Linear(2, 4))
        .through(nn.ReLU())
        .through(nn.Linear(4, 1))
        .also(nn.Linear(1, 1))
        .build()
    )
    with pytest.raises(CheckpointError, match=r"missing from the file: linear_4.weight"):
        extra.load_checkpoint(tmp_path / "relu.fdl")


def test_mismatch_without_saved_structure_points_at_parameter_free_parts(tmp_path: Path) -> None:
    relu = FlowBuilder(nn.Linear(2, 4)).through(nn.Sequential(nn.ReLU())).build()
    gelu = FlowBuilder(nn.Linear(2, 4)).through(nn.Sequential(nn.GELU())).build()
    save_checkpoint(relu, tmp_path / "plain.fdl", hash=relu.structural_hash())  # no structure
    with pytest.raises(CheckpointError, match="parameter-free structure"):
        gelu.load_checkpoint(tmp_path / "plain.fdl")


def test_reserved_metadata_keys_are_refused(model: Graph, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="reserved"):
        model.save_checkpoint(tmp_path / "m.fdl", metadata={"flodl.frozen": "[]"})
    assert not (tmp_path / "m.fdl").exists()


# --- the frozen set travels with the checkpoint ----------------------------------------------


def test_frozen_set_is_restored_on_resume(model: Graph, tmp_path: Path) -> None:
    """Phase 1 froze the encoder, phase 2 thawed scan: resuming must give exactly that."""
    model.freeze("encoder")
    model.thaw("encoder.scan")
    model.save_checkpoint(tmp_path / "phase2.fdl")
    meta = read_checkpoint_metadata(tmp_path / "phase2.fdl")
    assert json.loads(meta["flodl.frozen"]) == [
        "encoder.read.confidence.weight",
        "encoder.read.confidence.bias",
    ]
    resumed = make_model()  # a fresh script re-freezing from its phase-1 setup
    resumed.freeze("encoder")
    resumed.load_checkpoint(tmp_path / "phase2.fdl")
    assert _requires_grad(resumed) == _requires_grad(model)
    assert not resumed.is_frozen("encoder.scan") and resumed.is_frozen("encoder.read")
    # ... and the other way round: what was trainable at save time is trainable again.
    everything_frozen = make_model()
    everything_frozen.freeze("encoder")
    everything_frozen.freeze("head")
    everything_frozen.load_checkpoint(tmp_path / "phase2.fdl")
    assert _requires_grad(everything_frozen) == _requires_grad(model)


def test_partial_load_only_touches_loaded_parameters(tmp_path: Path) -> None:
    torch.manual_seed(0)
    a = make_model()
    a.freeze("head")
    save_checkpoint(a, tmp_path / "all.fdl", hash=None, metadata={"flodl.frozen": '["head.bias"]'})
    b = make_model()
    b.freeze("encoder")
    report = b.load_checkpoint(tmp_path / "all.fdl", strict=False)
    assert report.missing == []
    # head.bias frozen as stored; everything else the file lists as trainable.
    assert [n for n, p in b.named_parameters() if not p.requires_grad] == ["head.bias"]


def test_file_without_frozen_set_leaves_requires_grad_alone(model: Graph, tmp_path: Path) -> None:
    save_checkpoint(model, tmp_path / "plain.fdl", hash=model.structural_hash())
    other = make_model()
    other.freeze("encoder.read")
    other.load_checkpoint(tmp_path / "plain.fdl")
    assert other.is_frozen("encoder.read") and not other.is_frozen("encoder.scan")


@pytest.mark.parametrize("raw", ["not json", '{"a": 1}', "[1, 2]"])
def test_malformed_frozen_set_raises_before_anything_changes(
    model: Graph, tmp_path: Path, raw: str
) -> None:
    path = tmp_path / "bad.fdl"
    save_checkpoint(model, path, hash=model.structural_hash(), metadata={"flodl.frozen": raw})
    torch.manual_seed(5)
    other = make_model()
    before = _state(other)
    with pytest.raises(CheckpointError, match=r"flodl\.frozen"):
        other.load_checkpoint(path)
    _assert_same(_state(other), before)


def test_missing_file(model: Graph, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        model.load_checkpoint(tmp_path / "nope.fdl")
    with pytest.raises(CheckpointError):
        model.load_subgraph_checkpoint("encoder", tmp_path / "nope.fdl")


@pytest.mark.parametrize("file", [None, 3])
def test_a_checkpoint_file_that_is_not_a_path_is_refused(model: Graph, file: object) -> None:
    with pytest.raises(ConfigError, match="load_checkpoint: the checkpoint file must be a str"):
        model.load_checkpoint(file)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="load_subgraph_checkpoint: the checkpoint file must"):
        model.load_subgraph_checkpoint("encoder", file)  # type: ignore[arg-type]


# --- subgraph checkpoints --------------------------------------------------------------------


def test_standalone_component_loads_into_the_composed_model(tmp_path: Path) -> None:
    torch.manual_seed(3)
    encoder = make_encoder()  # "trained" standalone
    encoder.save_checkpoint(tmp_path / "encoder_v1.fdl.gz")
    torch.manual_seed(4)
    model = make_model()
    head = {k: v.clone() for k, v in model.state_dict().items() if k.startswith("head")}
    report = model.load_subgraph_checkpoint("encoder", tmp_path / "encoder_v1.fdl.gz")
    assert report.loaded == list(encoder.state_dict())
    assert report.skipped == [] and report.missing == []
    _assert_same(_state(model.subgraph("encoder")), _state(encoder))
    for k, v in head.items():  # nothing outside the subgraph moved
        assert torch.equal(model.state_dict()[k], v)


def test_nested_subgraph_path(tmp_path: Path) -> None:
    torch.manual_seed(3)
    scan = make_scan()
    scan.save_checkpoint(tmp_path / "scan.fdl")
    model = make_model()
    model.load_subgraph_checkpoint("encoder.scan", tmp_path / "scan.fdl")
    _assert_same(_state(model.subgraph("encoder.scan")), _state(scan))


def test_subgraph_frozen_set_in_file_is_not_applied(tmp_path: Path) -> None:
    scan = make_scan()
    scan.freeze("hidden")  # a module-less tag: nothing to freeze
    for p in scan.parameters():
        p.requires_grad_(False)
    scan.save_checkpoint(tmp_path / "scan.fdl")
    model = make_model()
    model.load_subgraph_checkpoint("encoder.scan", tmp_path / "scan.fdl")
    assert not model.is_frozen("encoder.scan")  # the composed model decides


def test_subgraph_hash_mismatch_raises_and_leaves_model_untouched(tmp_path: Path) -> None:
    make_encoder(width=16).save_checkpoint(tmp_path / "wide.fdl")
    model = make_model()
    before = _state(model)
    with pytest.raises(CheckpointError, match="architecture mismatch") as e:
        model.load_subgraph_checkpoint("encoder", tmp_path / "wide.fdl")
    assert "saved from graph 'encoder'" in str(e.value)
    _assert_same(_state(model), before)


def test_wrong_namespace_whole_model_into_subgraph(tmp_path: Path) -> None:
    """A hash-less file saved from the parent: names carry the 'encoder.' prefix."""
    torch.manual_seed(3)
    parent = make_model()
    save_checkpoint(parent, tmp_path / "parent.fdl")  # no hash: only names can tell
    model = make_model()
    before = _state(model)
    with pytest.raises(CheckpointError, match=r"prefix 'encoder\.'"):
        model.load_subgraph_checkpoint("encoder", tmp_path / "parent.fdl")
    _assert_same(_state(model), before)


def test_wrong_namespace_other_component(tmp_path: Path) -> None:
    save_checkpoint(make_read(), tmp_path / "read.fdl")  # no hash
    model = make_model()
    before = _state(model)
    with pytest.raises(CheckpointError, match="namespace") as e:
        model.load_subgraph_checkpoint("encoder.scan", tmp_path / "read.fdl")
    assert "not in the subgraph: confidence.weight" in str(e.value)
    _assert_same(_state(model), before)


def test_subgraph_non_strict_loads_the_overlap(tmp_path: Path) -> None:
    torch.manual_seed(3)
    scan = make_scan()
    tensors = {k: v for k, v in scan.state_dict().items() if k.endswith("weight")}
    write_checkpoint(tmp_path / "w.fdl", list(tensors.items()))
    model = make_model()
    with pytest.raises(CheckpointError, match="namespace"):
        model.load_subgraph_checkpoint("encoder.scan", tmp_path / "w.fdl")
    report = model.load_subgraph_checkpoint("encoder.scan", tmp_path / "w.fdl", strict=False)
    assert report.loaded == list(tensors) and report.missing
    sub = model.subgraph("encoder.scan").state_dict()
    for k, v in tensors.items():
        assert torch.equal(sub[k], v)


def test_subgraph_path_must_name_a_subgraph(model: Graph, tmp_path: Path) -> None:
    model.save_checkpoint(tmp_path / "m.fdl")
    with pytest.raises(PathError, match="not a subgraph"):
        model.load_subgraph_checkpoint("head", tmp_path / "m.fdl")
    with pytest.raises(PathError, match="valid names here: encoder"):
        model.load_subgraph_checkpoint("decoder", tmp_path / "m.fdl")
