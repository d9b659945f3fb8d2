"""The strict loader: key mapping, the three error buckets, all-or-nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from flodl_core import CheckpointError, ConfigError
from flodl_hf import KeyPolicy, load_weights, plan_load


class LayerScale(nn.Module):
    """A module whose own parameter is called ``gamma`` (must not be renamed)."""

    def __init__(self) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(4))


def _model() -> nn.Module:
    m = nn.Module()
    m.bert = nn.Module()
    m.bert.embeddings = nn.Module()
    m.bert.embeddings.LayerNorm = nn.LayerNorm(4)
    m.bert.scale = LayerScale()
    m.classifier = nn.Linear(4, 2)
    return m


POLICY = KeyPolicy(prefix="bert", roots=("embeddings", "scale"), optional=("classifier.",))


def _state(**extra: torch.Tensor) -> dict[str, torch.Tensor]:
    s = {
        "bert.embeddings.LayerNorm.gamma": torch.full((4,), 2.0),
        "bert.embeddings.LayerNorm.beta": torch.full((4,), 3.0),
        "bert.scale.gamma": torch.full((4,), 5.0),
        "classifier.weight": torch.ones(2, 4),
        "classifier.bias": torch.zeros(2),
    }
    s.update(extra)
    return s


def test_legacy_gamma_beta_and_module_gamma() -> None:
    m = _model()
    rep = load_weights(m, _state(), POLICY)
    assert rep.renamed == {
        "bert.embeddings.LayerNorm.gamma": "bert.embeddings.LayerNorm.weight",
        "bert.embeddings.LayerNorm.beta": "bert.embeddings.LayerNorm.bias",
    }
    assert torch.equal(m.bert.embeddings.LayerNorm.weight, torch.full((4,), 2.0))
    assert torch.equal(m.bert.scale.gamma, torch.full((4,), 5.0))  # kept its own name


def test_bare_backbone_file_gets_the_prefix_and_foreign_heads_are_unused() -> None:
    m = _model()
    state = {
        "embeddings.LayerNorm.weight": torch.ones(4),
        "embeddings.LayerNorm.bias": torch.ones(4),
        "scale.gamma": torch.ones(4),
        "embeddings.position_ids": torch.arange(4),
        "cls.predictions.bias": torch.zeros(9),
    }
    _, rep = plan_load({k: tuple(v.shape) for k, v in m.state_dict().items()}, state, POLICY)
    assert rep.ok
    assert rep.renamed["scale.gamma"] == "bert.scale.gamma"
    assert rep.ignored == ["embeddings.position_ids"] and rep.unused == ["cls.predictions.bias"]
    assert rep.initialized == ["classifier.weight", "classifier.bias"]


def test_three_buckets_and_nothing_changes(tmp_path: Path) -> None:
    m = _model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    state = _state(**{"bert.extra.weight": torch.ones(1), "classifier.weight": torch.ones(3, 4)})
    del state["bert.scale.gamma"]
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_weights(m, tmp_path, POLICY)
    msg = str(e.value)
    assert "1 missing from the checkpoint:\n  bert.scale.gamma" in msg
    assert "1 unexpected in the checkpoint:\n  bert.extra.weight" in msg
    assert "classifier.weight: (3, 4) vs (2, 4)" in msg
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_partial_head_is_missing_not_initialised() -> None:
    m = _model()
    state = _state()
    del state["classifier.bias"]
    _, rep = plan_load({k: tuple(v.shape) for k, v in m.state_dict().items()}, state, POLICY)
    assert rep.missing == ["classifier.bias"] and not rep.initialized


def test_copy_keeps_parameter_identity_and_assign_replaces() -> None:
    m = _model()
    w = m.classifier.weight
    load_weights(m, _state(), POLICY)
    assert m.classifier.weight is w and torch.equal(w, torch.ones(2, 4))
    state = {k: v.to(torch.float64) for k, v in _state().items()}
    load_weights(m, state, POLICY, assign=True)
    assert m.classifier.weight is not w and m.classifier.weight.dtype == torch.float64
    assert m.classifier.weight.requires_grad


def test_summary_lists_at_most_twenty() -> None:
    m = nn.Linear(2, 2)
    state = {f"junk.{i}": torch.zeros(1) for i in range(25)}
    with pytest.raises(CheckpointError) as e:
        load_weights(m, {**state, "weight": torch.zeros(2, 2), "bias": torch.zeros(2)})
    assert "25 unexpected" in str(e.value) and "... and 5 more" in str(e.value)


@pytest.mark.parametrize("assign", [False, True])
def test_a_tensor_of_the_wrong_kind_loads_nothing(assign: bool) -> None:
    m = _model()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    state = _state(**{"classifier.weight": torch.ones(2, 4, dtype=torch.int64)})
    with pytest.raises(
        CheckpointError, match=r"classifier\.weight: torch\.int64 vs torch\.float32"
    ):
        load_weights(m, state, POLICY, assign=assign)
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_a_state_dict_must_hold_tensors() -> None:
    with pytest.raises(CheckpointError, match=r"state\['classifier\.bias'\] is str"):
        load_weights(_model(), _state(**{"classifier.bias": "zeros"}), POLICY)  # type: ignore[arg-type]
    with pytest.raises(
        ConfigError, match="source must be a weight file, a model folder or a state"
    ):
        load_weights(_model(), 5, POLICY)  # type: ignore[arg-type]
