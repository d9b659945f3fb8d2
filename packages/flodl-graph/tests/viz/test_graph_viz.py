"""DOT / SVG / profiling of real graphs, one of them using every builder construct."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_core import ConfigError, PathError
from flodl_graph import (
    FixedSelector,
    FlowBuilder,
    Graph,
    MergeOp,
    SoftmaxRouter,
    StateAdd,
    ThresholdHalt,
)
from flodl_graph.viz._graph_scene import param_count_label

SVG = "{http://www.w3.org/2000/svg}"
D = 4


def showcase() -> Graph:
    """Every construct: input, through, also, fork, split/merge, tag/using (backward and
    forward ref), loop (for/while), gate, switch, map, a nested labeled graph."""
    inner = FlowBuilder(nn.Linear(D, D)).tag("inner_out").label("block").build()
    return (
        FlowBuilder(nn.Linear(D, D))
        .input(["ctx"])
        .tag("encoded")
        .through(nn.GELU())
        .through(nn.LayerNorm(D))
        .also(nn.Linear(D, D))
        .fork(nn.Linear(D, 2))
        .tag("side")
        .split([nn.Linear(D, D), nn.Linear(D, D)])
        .merge(MergeOp.MEAN)
        .loop_body(nn.Linear(D, D))
        .for_n(2)
        .tag("refined")
        .gate(SoftmaxRouter(D, 2), [nn.Linear(D, D), nn.Linear(D, D)])
        .switch(FixedSelector(1), [nn.Identity(), nn.Linear(D, D)])
        .through(StateAdd())
        .using(["encoded", "ctx", "memory"])
        .tag("memory")
        .loop_body(nn.Tanh())
        .while_cond(ThresholdHalt(10.0), 3)
        .map(nn.Linear(D, D))
        .each()
        .through(inner)
        .through(nn.Linear(D, 2))
        .build()
    )


@pytest.fixture
def g() -> Graph:
    torch.manual_seed(0)
    return showcase()


def _run(g: Graph) -> torch.Tensor:
    x = torch.randn(3, D)
    return g(x, torch.randn(3, D))


def test_dot_levels_shapes_and_edge_styles(g: Graph) -> None:
    dot = g.dot()
    assert dot.startswith('digraph "G" {')
    assert dot.count("subgraph cluster_level_") == len(g.levels)
    kinds = {n.kind for n in g.nodes}
    assert {"input", "also", "add", "fork", "split", "merge", "loop", "gate", "switch"} <= kinds
    assert {"map", "graph", "module"} <= kinds
    for shape in ("invhouse", "house", "circle", "box3d", "diamond", "parallelogram", "tab"):
        assert f"shape={shape}" in dot, shape
    assert "shape=ellipse" in dot  # GELU / Tanh are activations
    assert 'fillcolor="#d5f5e3"' in dot  # LayerNorm
    # using(["encoded", "ctx"]) are backward refs: dashed blue with the ref name.
    assert re.search(r'color="#2980b9", style=dashed, label="encoded"', dot)
    assert re.search(r'color="#2980b9", style=dashed, label="ctx"', dot)
    # using(["memory"]) before tag("memory"): dotted orange state edge outside the layout.
    state = [ln for ln in dot.splitlines() if 'label="state"' in ln]
    assert len(state) == 1 and "style=dotted" in state[0] and "constraint=false" in state[0]
    assert "#encoded" in dot and "#memory" in dot
    assert "block [" in dot  # the nested graph shows its label and short hash
    assert g.subgraph("block").short_hash() in dot


def test_builtin_svg_parses_and_draws_every_node_and_edge(g: Graph, tmp_path: Path) -> None:
    out = tmp_path / "g.svg"
    svg = g.svg(out, engine="builtin")
    assert out.read_text() == svg
    root = ET.fromstring(svg.encode())
    node_ids = {el.get("id", "")[5:] for el in root.iter(f"{SVG}g") if el.get("class") == "node"}
    assert node_ids == {n.id for n in g.nodes}
    n_edges = sum(len(n.inputs) + len(n.refs) for n in g.nodes)
    assert sum(1 for el in root.iter(f"{SVG}g") if el.get("class") == "edge") == n_edges
    clusters = [el for el in root.iter(f"{SVG}g") if el.get("class") == "cluster"]
    assert len(clusters) == len(g.levels)


def test_auto_engine_works_without_graphviz(g: Graph) -> None:
    svg = g.svg()
    assert ET.fromstring(svg.encode()).tag == f"{SVG}svg"


@pytest.mark.skipif(shutil.which("dot") is not None, reason="Graphviz is installed here")
def test_forcing_graphviz_without_it_says_how_to_install(g: Graph) -> None:
    with pytest.raises(ConfigError, match="install Graphviz"):
        g.svg(engine="graphviz")


def test_bad_engine(g: Graph) -> None:
    with pytest.raises(ConfigError, match="engine must be"):
        g.svg(engine="png")  # type: ignore[arg-type]


def test_profile_needs_profiling_and_a_forward(g: Graph) -> None:
    assert g.profile() is None
    with pytest.raises(ConfigError, match="enable_profiling"):
        g.svg_with_profile()
    with pytest.raises(ConfigError, match="enable_profiling"):
        g.dot_with_profile()


def test_profiling_heat_map(g: Graph, tmp_path: Path) -> None:
    expected = _run(g)
    g.enable_profiling()
    torch.manual_seed(0)
    g.reset_state()
    out = _run(g)
    assert out.shape == expected.shape
    prof = g.profile()
    assert prof is not None
    assert set(prof.node_ns) <= {n.id for n in g.nodes} and prof.node_ns
    assert len(prof.level_ns) == len(g.levels)
    assert prof.total_ns > 0 and all(v >= 0 for v in prof.node_ns.values())
    text = str(prof)
    assert text.startswith("forward: ") and "level 0" in text
    dot = g.dot_with_profile()
    # The slowest node is red; every profiled node shows a time.
    slow_id = prof.slowest(1)[0][0]
    assert len(prof.slowest(0)) == 0
    with pytest.raises(ConfigError, match=r"Profile\.slowest: n must be an int >= 0, got -1"):
        prof.slowest(-1)  # used to return every node but the fastest
    assert re.search(rf'"{slow_id}" \[label="[^"]*", shape=\w+, fillcolor="#e74c3c"', dot)
    assert re.search(r"\d (ns|µs|ms)", dot)
    assert re.search(r"level 0  [\d.]+ (ns|µs|ms)  x", dot)
    svg = g.svg_with_profile(tmp_path / "p.svg", engine="builtin")
    assert "#e74c3c" in svg
    ET.fromstring(svg.encode())
    g.disable_profiling()


def test_timing_trends(g: Graph, tmp_path: Path) -> None:
    g.enable_profiling()
    for _ in range(2):
        for _ in range(3):
            _run(g)
            g.collect_timings(["encoded", "memory"])
        g.flush_timings()
    t = g.timing_trend("encoded")
    assert len(t) == 2 and t.min() > 0
    assert len(g.timing_trends(["encoded", "memory"])) == 2
    with pytest.raises(PathError, match="no node named 'nope'"):
        g.collect_timings(["nope"])
    assert len(g.timing_trend("block")) == 0  # a node never timed: an empty trend
    with pytest.raises(PathError, match="no timing named 'nope'"):
        g.timing_trend("nope")
    g.plot_timings_html(tmp_path / "t.html")
    assert "Timing Trends" in (tmp_path / "t.html").read_text()
    g.export_timing_trends(tmp_path / "t.csv")
    assert (tmp_path / "t.csv").read_text().splitlines()[0] == "epoch,encoded,memory"
    g.reset_timing_trend()
    with pytest.raises(ConfigError, match="nothing has been flushed"):
        g.export_timing_trends(tmp_path / "t2.csv")


def test_param_count_labels() -> None:
    assert param_count_label(0) == ""
    assert param_count_label(840) == "840 params"
    assert param_count_label(1_234) == "1.2K params"
    assert param_count_label(3_400_000) == "3.4M params"


def _svg_nodes(svg: str) -> dict[str, str]:
    """node id -> its label text (tspans joined by newlines)."""
    root = ET.fromstring(svg.encode())
    return {
        el.get("id", "")[5:]: "\n".join(t.text or "" for t in el.iter(f"{SVG}tspan"))
        for el in root.iter(f"{SVG}g")
        if el.get("class") == "node"
    }


@pytest.mark.parametrize("op", [MergeOp.ADD, MergeOp.MEAN])
def test_merge_node_shows_its_operation(op: MergeOp) -> None:
    g = FlowBuilder(nn.Linear(D, D)).split([nn.Linear(D, D), nn.Linear(D, D)]).merge(op).build()
    (merge,) = [n for n in g.nodes if n.kind == "merge"]
    assert _svg_nodes(g.svg(engine="builtin"))[merge.id].split("\n")[:2] == ["merge", op.value]
    assert re.search(rf'"{merge.id}" \[label="merge\\n{op.value}"', g.dot())
    assert f'tooltip="{merge.id} (merge: {op.value})"' in g.dot()


@pytest.mark.parametrize("n_nodes", [1, 2])
def test_svg_of_one_and_two_node_graphs(n_nodes: int) -> None:
    fb = FlowBuilder(nn.Linear(D, D))
    if n_nodes == 2:
        fb = fb.through(nn.ReLU())
    g = fb.build()
    assert len(g.nodes) == n_nodes
    labels = _svg_nodes(g.svg(engine="builtin"))
    assert set(labels) == {n.id for n in g.nodes}
    assert labels[g.nodes[0].id].startswith("linear")


def test_monitor_watch_shows_the_diagram_of_a_one_node_graph() -> None:
    monitor = pytest.importorskip("flodl_monitor")
    import io

    g = FlowBuilder(nn.Linear(D, D)).build()
    m = monitor.Monitor(2, stream=io.StringIO(), resources=False, record_path=None)
    m.watch(g)
    svg = m.graph_svg()
    assert svg is not None and "<svg" in svg
    assert set(_svg_nodes(svg)) == {g.nodes[0].id}
