"""``HfModel`` exposes its graph's namespaces (``tree``, ``viz``, ``metrics``, ``timings``) and
keeps the tree's flat names as aliases, with no ``__getattr__`` forwarding."""

from __future__ import annotations

import pytest
import torch

import flodl_hf as fh
from flodl_graph import Graph, GraphTree, GraphViz, Metrics

TINY = {
    "model_type": "bert",
    "vocab_size": 40,
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 8,
    "max_position_embeddings": 16,
    "pad_token_id": 0,
}
TREE_NAMES = (
    "freeze",
    "thaw",
    "is_frozen",
    "parameters_at",
    "named_parameters_at",
    "named_buffers_at",
    "set_training_at",
    "subgraph",
    "validate_path",
    "tree_summary",
    "param_summary",
    "save_checkpoint",
    "load_checkpoint",
    "load_subgraph_checkpoint",
    "tagged_at",
)


@pytest.fixture
def model() -> fh.HfModel:
    torch.manual_seed(0)
    config = fh.HfConfig.from_dict(TINY)
    return fh.AutoModelForSequenceClassification.from_config(config, num_labels=3)


def test_namespaces_are_the_graphs(model: fh.HfModel) -> None:
    g = model.graph
    assert isinstance(model.tree, GraphTree) and model.tree is g.tree
    assert isinstance(model.viz, GraphViz) and model.viz is g.viz
    assert isinstance(model.metrics, Metrics) and model.metrics is g.metrics
    assert model.timings is g.timings and model.timings is not model.metrics
    assert "__getattr__" not in type(model).__dict__ and "__getattr__" not in fh.HfModel.__dict__


@pytest.mark.parametrize("name", TREE_NAMES)
def test_flat_tree_names_are_the_graph_tree_methods(model: fh.HfModel, name: str) -> None:
    target = "summary" if name == "tree_summary" else name
    assert getattr(model, name) == getattr(model.graph.tree, target)
    assert fh.HfModel.__dict__[name] is Graph.__dict__[name]


def test_tree_and_metrics_through_the_model(model: fh.HfModel, tmp_path) -> None:
    assert model.freeze("bert.embeddings") > 0
    assert model.tree.is_frozen("bert.embeddings") and model.is_frozen("bert.embeddings")
    names = dict(model.named_parameters())
    assert not names["bert.embeddings.word_embeddings.weight"].requires_grad
    model.tree.thaw("bert.embeddings")
    assert names["bert.embeddings.word_embeddings.weight"].requires_grad
    ids = torch.randint(1, 40, (2, 6))
    model(ids)
    assert model.tagged_at("bert.pooler") is not None
    model.metrics.record("loss", [1.0, 2.0])
    model.graph.end_epoch()
    assert model.graph.latest_metrics() == {"loss": 1.5}
    model.save_checkpoint(tmp_path / "m.fdl")
    report = model.load_checkpoint(tmp_path / "m.fdl")
    assert report.loaded and not report.missing and not report.skipped
    assert "<svg" in model.viz.svg(engine="builtin")
