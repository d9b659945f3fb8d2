"""Graph tree: path resolution rules and errors, label validation, summaries.

The tree under test (``tree``, ``model``, ``x``) is built in conftest.py.
"""

from __future__ import annotations

import pytest
from torch import nn

from flodl_core import BuildError, ConfigError, PathError
from flodl_graph import FlowBuilder, PathKind
from flodl_graph._tree import check_label


def test_labeled_children_form_the_tree(model) -> None:
    enc = model.child_graph("encoder")
    assert enc.label == "encoder" and enc.is_composed
    assert not model.is_composed
    assert list(model.tree_children()) == ["encoder"]
    assert list(enc.tree_children()) == ["scan", "read"]
    assert model.subgraph("encoder.scan") is enc.child_graph("scan")
    assert model.subgraph_paths() == ["encoder", "encoder.scan", "encoder.read"]


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("encoder", PathKind.SUBGRAPH),
        ("encoder.scan", PathKind.SUBGRAPH),
        ("encoder.read", PathKind.SUBGRAPH),
        ("encoder.scan.hidden", PathKind.TAG),
        ("encoder.read.confidence", PathKind.TAG),
        ("head", PathKind.TAG),
        ("score", PathKind.TAG),
    ],
)
def test_validate_path(model, path: str, kind: PathKind) -> None:
    assert model.validate_path(path) is kind


def test_child_label_beats_a_tag_of_the_same_name_on_its_node(tree) -> None:
    # Allowed: the label and the tag sit on the same node.
    g = FlowBuilder(tree.encoder()).tag("encoder").through(nn.Linear(3, 2)).build()
    assert g.validate_path("encoder") is PathKind.SUBGRAPH
    assert g.subgraph("encoder").label == "encoder"


def test_internal_tags_are_hidden_across_boundaries_only(model) -> None:
    scan = model.subgraph("encoder.scan")
    assert scan.validate_path("_raw") is PathKind.TAG  # visible locally
    with pytest.raises(PathError, match="internal") as e:
        model.validate_path("encoder.scan._raw")
    assert e.value.valid == ["hidden"]  # the internal tag is not offered as a choice
    read = model.subgraph("encoder.read")
    assert read.validate_path("secret") is PathKind.TAG
    with pytest.raises(PathError, match=r"'secret' is internal to 'encoder\.read'"):
        model.validate_path("encoder.read.secret")


@pytest.mark.parametrize(
    ("path", "message", "valid"),
    [
        (
            "nope",
            "no child graph or tag named 'nope' in the root graph",
            ["encoder", "head", "score"],
        ),
        ("encoder.nope", "no child graph or tag named 'nope' in 'encoder'", ["read", "scan"]),
        ("encoder.nope.x", "'nope' is not a child graph of 'encoder'", ["read", "scan"]),
        ("head.weight", "'head' is a tag, not a child graph of the root graph", ["encoder"]),
        ("encoder.scan.hidden.x", "'hidden' is a tag, not a child graph of 'encoder.scan'", []),
        ("", "empty graph path", []),
        ("encoder..scan", "empty segment", []),
        (".encoder", "empty segment", []),
        ("encoder.", "empty segment", []),
    ],
)
def test_bad_paths_name_the_fault_and_list_valid_names(model, path, message, valid) -> None:
    with pytest.raises(PathError) as e:
        model.validate_path(path)
    assert message in str(e.value)
    assert e.value.valid == valid
    if valid:
        assert f"valid names here: {', '.join(valid)}" in str(e.value)


def test_path_errors_are_key_errors_and_non_strings_are_config_errors(model) -> None:
    with pytest.raises(KeyError):
        model.validate_path("nope")
    with pytest.raises(ConfigError, match="must be a string"):
        model.validate_path(3)  # type: ignore[arg-type]


def test_subgraph_and_child_graph_errors(model) -> None:
    with pytest.raises(PathError, match="names the tag 'hidden', not a subgraph"):
        model.subgraph("encoder.scan.hidden")
    with pytest.raises(PathError, match="no child graph labeled 'scan'") as e:
        model.child_graph("scan")  # one level only
    assert e.value.valid == ["encoder"]
    with pytest.raises(ConfigError, match="child_graph: label must be a str, got list"):
        model.child_graph(["encoder"])  # used to be a TypeError: unhashable type


def test_unlabeled_nested_graph_is_a_plain_module() -> None:
    inner = FlowBuilder(nn.Linear(4, 4)).tag("t").build()
    g = FlowBuilder(inner).through(nn.Linear(4, 2)).build()
    assert g.tree_children() == {}
    assert not inner.is_composed
    assert len(list(g.parameters())) == 4  # its parameters still belong to the parent


# --- build-time label validation -------------------------------------------------------------


def test_check_label() -> None:
    assert check_label("scan") is None
    assert "contains '.'" in str(check_label("a.b"))
    assert "empty" in str(check_label(""))
    assert "whitespace" in str(check_label(" a"))
    assert "must be a string" in str(check_label(3))


def test_builder_rejects_dotted_label() -> None:
    # Caught at the labeled graph's own build, before it can be nested anywhere.
    with pytest.raises(BuildError, match=r"label 'a\.b' contains '\.'"):
        FlowBuilder(nn.Linear(2, 2)).label("a.b").build()


def test_builder_rejects_duplicate_child_labels(tree) -> None:
    with pytest.raises(BuildError, match="duplicate child label 'scan'"):
        FlowBuilder(tree.scan()).through(nn.Linear(8, 4)).through(tree.scan(4)).build()


def test_builder_rejects_label_equal_to_another_nodes_tag(tree) -> None:
    with pytest.raises(BuildError, match="'scan'"):
        FlowBuilder(nn.Linear(4, 4)).tag("scan").through(tree.scan()).build()


# --- summaries -------------------------------------------------------------------------------


def test_tree_summary_shows_hashes_tags_and_frozen_counts(model) -> None:
    model.freeze("encoder.read")
    text = model.tree_summary()
    lines = text.splitlines()
    assert lines[0] == f"(root) [hash: {model.short_hash()}]"
    assert "+-- tags: head, score" in lines
    enc = model.subgraph("encoder")
    assert f"+-- encoder [hash: {enc.short_hash()}]" in lines
    assert "|   |   +-- tags: confidence" in lines  # 'secret' is internal: not listed
    assert "|   |   +-- params: 27 [frozen]" in lines
    assert "|   |   +-- tags: hidden" in lines  # '_raw' is internal
    assert any(line.endswith("params: 67 (27 frozen)") for line in lines)  # encoder
    assert lines[2] == "+-- params: 75 (27 frozen)"


def test_param_summary_totals_and_shares(model) -> None:
    model.freeze("encoder.scan")
    text = model.param_summary()
    assert text.splitlines()[0] == "parameters: 75 total, 35 trainable, 40 frozen"
    row = next(r for r in text.splitlines() if r.startswith("encoder.scan "))
    assert row.split() == ["encoder.scan", "40", "53.3%", "0", "40"]
    assert sum(p.numel() for p in model.parameters()) == 75


def test_summaries_of_standalone_parts(tree) -> None:
    read = tree.read()
    assert read.tree_summary().splitlines()[0].startswith("read [hash: ")
    assert tree.model(4).param_summary().splitlines()[0].startswith("parameters: ")
