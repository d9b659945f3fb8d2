"""A Graph's namespaces (``tree``, ``viz``, ``metrics``, ``timings``) and the flat aliases of the
seed's names: each alias is the namespace's bound method, the forward never touches them, and
copies keep them bound to the copy."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torch import nn

from flodl_core import BuildError
from flodl_graph import FlowBuilder, Graph, GraphTree, GraphViz, Metrics, Reduce
from flodl_graph._alias import Alias

# Every flat name of the seed kept on Graph (README, docs/, examples/ and the monitor use them).
SEED_NAMES = {
    "tree": [
        "validate_path", "subgraph", "child_graph", "tree_children", "subgraph_paths",
        "tagged_at", "parameters_at", "named_parameters_at", "named_buffers_at", "freeze", "thaw",
        "is_frozen", "frozen_parameter_names", "set_training_at", "save_checkpoint",
        "load_checkpoint", "load_subgraph_checkpoint", "tree_summary", "param_summary",
    ],
    "viz": [
        "dot", "dot_with_profile", "svg", "svg_with_profile", "enable_profiling",
        "disable_profiling", "profile",
    ],
    "metrics": [
        "collect", "collect_with", "collect_at", "record", "record_scalar", "record_at",
        "collected", "flush", "flush_local", "trend", "trends", "trend_at", "reset_trend",
        "latest_metrics", "latest_metrics_local", "eta", "plot_html", "export_trends",
    ],
    "timings": [
        "collect_timings", "flush_timings", "timing_trend", "timing_trends",
        "reset_timing_trend", "plot_timings_html", "export_timing_trends",
    ],
}  # fmt: skip


def _graph() -> Graph:
    torch.manual_seed(0)
    inner = FlowBuilder(nn.Linear(4, 4)).tag("hidden").label("enc").build()
    return FlowBuilder(inner).through(nn.Linear(4, 1)).tag("score").build()


def test_namespaces_are_plain_objects_of_one_class_each() -> None:
    g = _graph()
    assert isinstance(g.tree, GraphTree) and isinstance(g.viz, GraphViz)
    assert type(g.metrics) is Metrics and type(g.timings) is Metrics
    assert g.metrics is not g.timings
    # No mixins: the features live in the namespaces, not in Graph's bases.
    assert Graph.__mro__ == (Graph, nn.Module, object)
    # Not submodules: state_dict, children and parameters are the model's alone.
    spaces = ("tree", "viz", "metrics", "timings")
    assert not any(name in g._modules for name in spaces)
    assert not any(k.split(".")[0] in spaces for k in g.state_dict())


@pytest.mark.parametrize(("namespace", "name"), [(ns, n) for ns, ns_names in SEED_NAMES.items()
                                                 for n in ns_names])  # fmt: skip
def test_every_flat_name_is_the_namespace_method(namespace: str, name: str) -> None:
    g = _graph()
    alias = Graph.__dict__[name]
    assert isinstance(alias, Alias) and alias.namespace == namespace
    bound = getattr(g, name)
    target = getattr(getattr(g, namespace), alias.target)
    assert bound == target and bound.__self__ is getattr(g, namespace)
    assert alias.__doc__ and alias.target in alias.__doc__


def test_aliases_and_namespaces_share_state() -> None:
    g = _graph()
    g(torch.randn(3, 4))
    g.collect_with("score", Reduce.MEAN)
    g.metrics.record("loss", [1.0, 3.0])
    assert g.metrics.collected("loss") == g.collected("loss") == [1.0, 3.0]
    g.flush()
    assert g.trend("loss").values() == g.metrics.trend("loss").values() == [2.0]
    assert g.latest_metrics() == g.metrics.latest()
    assert g.flush_count == g.metrics.flush_count == 1
    assert g.tree.freeze("enc") == 2 and g.is_frozen("enc")
    assert g.tree.summary() == g.tree_summary()


def test_timings_is_the_metrics_class_fed_with_node_times() -> None:
    g = _graph()
    g.viz.enable_profiling()
    assert g.viz.profiling
    for _ in range(3):
        g(torch.randn(3, 4))
        g.timings.collect(["score"])
    g.timings.record("data_ms", 2.5)  # the same API: an external timing
    g.timings.flush()
    assert len(g.timings.trend("score")) == 1 and g.timings.trend("score").latest() > 0
    assert g.timings.latest()["data_ms"] == 2.5
    assert g.metrics.latest() == {}  # the two stores are separate
    with pytest.raises(Exception, match="already one number"):
        g.timings.collect_with(["score"], Reduce.MEAN)
    g.viz.disable_profiling()
    assert not g.viz.profiling


def test_forward_never_reads_the_namespaces() -> None:
    g = _graph()
    x = torch.randn(3, 4)
    expected = g(x)
    for name in ("tree", "viz", "metrics", "timings"):
        assert name not in g.code
        del g.__dict__[f"_ns_{name}"]
    torch.testing.assert_close(g(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "clone",
    [copy.deepcopy, lambda g: pickle.loads(pickle.dumps(g))],
    ids=["deepcopy", "pickle"],
)
def test_copies_bind_namespaces_to_the_copy(clone) -> None:
    g = _graph()
    g.record("loss", 1.0)
    g.flush()
    c = clone(g)
    for name in ("tree", "viz", "metrics", "timings"):
        assert getattr(c, name)._g is c
    assert c.latest_metrics() == {"loss": 1.0}
    c.record("loss", 3.0)
    c.flush()
    assert g.trend("loss").values() == [1.0] and c.trend("loss").values() == [1.0, 3.0]
    assert c.tree.freeze("enc") == 2 and not g.is_frozen("enc")


def test_torch_save_round_trip_keeps_namespaces() -> None:
    g = _graph()
    buf = io.BytesIO()
    torch.save(g, buf)
    buf.seek(0)
    c = torch.load(buf, weights_only=False)  # a test-made pickle of our own object
    x = torch.randn(2, 4)
    torch.testing.assert_close(c(x), g(x))
    assert c.tree._g is c and c.subgraph("enc").tree._g is c.subgraph("enc")


@pytest.mark.parametrize("name", ["tree", "viz", "metrics", "timings"])
def test_a_tag_named_like_a_namespace_is_refused_at_build(name: str) -> None:
    # As for every Graph attribute: the submodule would be unreachable as an attribute and
    # through nn.Module.get_submodule.
    with pytest.raises(BuildError, match=f"'{name}' cannot name a submodule"):
        FlowBuilder(nn.Linear(2, 3)).tag(name).through(nn.Linear(3, 1)).build()


def test_alias_on_the_class_is_the_descriptor() -> None:
    alias = Graph.freeze
    assert isinstance(alias, Alias)
    assert repr(alias) == "<alias of tree.freeze>"
    assert alias.__wrapped__ is GraphTree.freeze
