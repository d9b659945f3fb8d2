"""The built-in layered SVG layout and the DOT renderer, over hand-made scenes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import get_args

import pytest

from flodl_graph.viz._dot import dot_quote, render_dot
from flodl_graph.viz._scene import Scene, SceneEdge, SceneNode, Shape, heat_color
from flodl_graph.viz._svg import _order_layers, render_svg

SVG = "{http://www.w3.org/2000/svg}"
SHAPES = get_args(Shape)  # every shape the scene offers


def _scene() -> Scene:
    nodes = [SceneNode(f"n{i}", f"node {i}\n#t<{i}>", level=i // 3, shape=s)
             for i, s in enumerate(SHAPES)]  # fmt: skip
    edges = [SceneEdge(f"n{i}", f"n{i + 3}") for i in range(len(SHAPES) - 3)]
    edges.append(SceneEdge("n0", "n4", style="dashed", color="#2980b9", label="ref"))
    edges.append(
        SceneEdge("n7", "n1", style="dotted", color="#e67e22", label="state", constraint=False)
    )
    return Scene(nodes, edges, {0: "level 0 & co"}, title="T&G")


def _node_boxes(root: ET.Element) -> dict[str, tuple[float, float]]:
    """node id -> text anchor (x, y) from the first tspan of each node group."""
    out = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "node":
            span = g.find(f"{SVG}text/{SVG}tspan")
            assert span is not None
            out[g.get("id", "")[5:]] = (float(span.get("x", 0)), float(span.get("y", 0)))
    return out


def test_svg_is_valid_xml_with_every_shape_edge_style_and_escaped_text() -> None:
    svg = render_svg(_scene())
    root = ET.fromstring(svg.encode())
    assert root.tag == f"{SVG}svg"
    nodes = [g for g in root.iter(f"{SVG}g") if g.get("class") == "node"]
    assert len(nodes) == len(SHAPES)
    edges = [g for g in root.iter(f"{SVG}g") if g.get("class") == "edge"]
    assert len(edges) == 9
    dashes = {
        p.get("stroke-dasharray") for p in root.iter(f"{SVG}path") if p.get("d", "")[:1] == "M"
    }
    assert {"6,4", "2,3", None} <= dashes
    texts = "".join(t.text or "" for t in root.iter(f"{SVG}tspan"))
    assert "#t<0>" in texts  # the "<" survived escaping and parsing
    clusters = [g for g in root.iter(f"{SVG}g") if g.get("class") == "cluster"]
    assert len(clusters) == 4
    assert any("level 0 & co" in (t.text or "") for g in clusters for t in g.iter(f"{SVG}text"))
    # one marker per edge colour, each referenced
    markers = {m.get("id") for m in root.iter(f"{SVG}marker")}
    assert len(markers) == 3


def test_levels_go_top_to_bottom_and_back_edges_route_right() -> None:
    scene = _scene()
    root = ET.fromstring(render_svg(scene).encode())
    pos = _node_boxes(root)
    by_level: dict[int, list[float]] = {}
    for n in scene.nodes:
        by_level.setdefault(n.level, []).append(pos[n.id][1])
    ys = [max(v) for _, v in sorted(by_level.items())]
    assert ys == sorted(ys) and len(set(ys)) == len(ys)
    width = float(root.get("width", 0))
    state = [g for g in root.iter(f"{SVG}g") if g.get("class") == "edge"][-1]
    path = state.find(f"{SVG}path")
    assert path is not None and path.get("stroke-dasharray") == "2,3"
    xs = [float(tok.split(",")[0].lstrip("MC")) for tok in path.get("d", "").split()]
    right_edge = max(x for x, _ in pos.values())
    assert max(xs) > right_edge and max(xs) < width


def test_barycenter_ordering_removes_an_obvious_crossing() -> None:
    # a->y and b->x cross when both layers keep build order; one sweep uncrosses them.
    layers = {0: ["a", "b"], 1: ["x", "y"]}
    _order_layers(layers, [SceneEdge("a", "y"), SceneEdge("b", "x")])
    pos = {n: i for lvl in layers.values() for i, n in enumerate(lvl)}
    assert (pos["a"] < pos["b"]) == (pos["y"] < pos["x"])


def test_ordering_keeps_nodes_without_neighbours_in_other_layers() -> None:
    # A node with no edge to another layer keeps its place; same-layer edges do not pull it.
    layers = {0: ["solo"], 1: ["p", "q", "r"]}
    _order_layers(layers, [SceneEdge("p", "q")])
    assert layers == {0: ["solo"], 1: ["p", "q", "r"]}


def test_one_node_scene_renders() -> None:
    svg = render_svg(Scene([SceneNode("only", "only", level=0)]))
    assert set(_node_boxes(ET.fromstring(svg.encode()))) == {"only"}


def test_layout_is_deterministic() -> None:
    assert render_svg(_scene()) == render_svg(_scene())


def test_empty_scene_renders() -> None:
    root = ET.fromstring(render_svg(Scene()).encode())
    assert root.tag == f"{SVG}svg"


def test_dot_has_clusters_styles_and_quoting() -> None:
    dot = render_dot(_scene())
    assert dot.startswith('digraph "T&G" {') and dot.rstrip().endswith("}")
    assert dot.count("subgraph cluster_level_") == 4
    assert dot.count("rank=same") == 4
    assert 'label="node 0\\n#t<0>", shape=box' in dot
    assert '"n0" -> "n4" [color="#2980b9", style=dashed, label="ref"' in dot
    assert "style=dotted" in dot and "constraint=false" in dot
    assert dot.count("{") == dot.count("}")


def test_dot_quote_escapes() -> None:
    assert dot_quote('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


@pytest.mark.parametrize(
    ("frac", "color"),
    [(0.0, "#27ae60"), (0.5, "#f39c12"), (1.0, "#e74c3c"), (-3.0, "#27ae60"), (9.0, "#e74c3c")],
)
def test_heat_color_stops(frac: float, color: str) -> None:
    assert heat_color(frac) == color


def test_heat_color_is_piecewise_linear() -> None:
    mid = heat_color(0.25)
    r, g, b = (int(mid[i : i + 2], 16) for i in (1, 3, 5))
    assert (r, g, b) == (
        round((0x27 + 0xF3) / 2),
        round((0xAE + 0x9C) / 2),
        round((0x60 + 0x12) / 2),
    )
