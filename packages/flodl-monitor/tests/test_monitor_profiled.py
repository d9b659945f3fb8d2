"""``Monitor.watch_profiled`` / ``finish_with``: the graph SVG heat-coloured by profiling, with
per-node times, served live at ``/graph.svg`` and baked into the offline page."""

from __future__ import annotations

import io
import json
import logging
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from flodl_monitor import Monitor, ResourceSampler

PLAIN = '<svg xmlns="http://www.w3.org/2000/svg"><text>plain</text></svg>'
HOT = '<svg xmlns="http://www.w3.org/2000/svg"><g fill="#e74c3c"><text>1.50 ms</text></g></svg>'
TIME = re.compile(r"\d+(\.\d+)? (ns|µs|ms|s)\b")


def _monitor(total: int = 2) -> Monitor:
    return Monitor(total, stream=io.StringIO(), resources=ResourceSampler(gpus=[]))


def _boot(page: str) -> dict[str, Any]:
    m = re.search(r"window\.FLODL_BOOT=(.*?);</script>", page, re.S)
    assert m is not None
    return json.loads(m.group(1))


class Drawer:
    """Duck-typed like a graph's drawing side: ``svg``, ``profile``, ``svg_with_profile``."""

    def __init__(self) -> None:
        self.profiled = False

    def svg(self) -> str:
        return PLAIN

    def profile(self) -> object | None:
        return object() if self.profiled else None

    def svg_with_profile(self) -> str:
        return HOT


class WithNamespace:
    """Like ``HfModel``: the drawing lives on ``model.viz``."""

    label = "wrapped"

    def __init__(self) -> None:
        self.viz = Drawer()


# --- duck-typed models (no flodl-graph needed) -------------------------------------------------


def test_watch_profiled_uses_the_heat_map_when_a_profile_exists() -> None:
    model = Drawer()
    model.profiled = True
    m = _monitor()
    m.watch_profiled(model)
    assert m.graph_svg() == HOT


def test_without_a_profile_it_shows_the_plain_graph_and_says_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = _monitor()
    with caplog.at_level(logging.WARNING, logger="flodl.monitor"):
        m.watch_profiled(Drawer())
    assert m.graph_svg() == PLAIN
    assert "no profile yet" in caplog.text and "enable_profiling()" in caplog.text


def test_a_viz_namespace_is_found() -> None:
    model = WithNamespace()
    m = _monitor()
    m.watch(model)
    assert m.graph_svg() == PLAIN
    model.viz.profiled = True
    m.watch_profiled(model)
    assert m.graph_svg() == HOT


def test_finish_with_redraws_then_finishes_and_the_report_carries_it(tmp_path: Path) -> None:
    model = Drawer()
    m = _monitor(1)
    m.watch(model)
    report = m.save_html(tmp_path / "report.html")
    assert _boot(report.read_text())["svg"] == PLAIN  # written now, before the profile
    m.log(0, 0.1, {"loss": 1.0})
    model.profiled = True
    m.finish_with(model)
    boot = _boot(report.read_text())
    assert boot["svg"] == HOT and boot["has_svg"] and boot["complete"]["epochs"] == 1
    model.profiled = False
    m.finish_with(model)  # already finished: nothing redrawn, nothing rewritten
    assert m.graph_svg() == HOT


# --- a real flodl graph ------------------------------------------------------------------------


@pytest.fixture
def profiled_graph() -> Any:
    fg = pytest.importorskip("flodl_graph")
    torch.manual_seed(0)
    g = (
        fg.FlowBuilder(torch.nn.Linear(4, 32))
        .tag("embed")
        .through(torch.nn.GELU())
        .also(torch.nn.Linear(32, 32))
        .through(torch.nn.Linear(32, 2))
        .tag("head")
        .build()
    )
    g.enable_profiling()
    for _ in range(2):
        g(torch.randn(8, 4))
    return g


def _check_heat_map(svg: str, graph: Any) -> None:
    prof = graph.profile()
    hottest = prof.slowest(1)[0][0]
    assert "#e74c3c" in svg  # the slowest node is red
    assert hottest in svg
    # Every timed node writes its time on the diagram; level captions add theirs.
    assert len(TIME.findall(svg)) >= len(prof.node_ns)


def test_real_graph_heat_map_live_and_offline(profiled_graph: Any, tmp_path: Path) -> None:
    m = _monitor(1)
    m.watch_profiled(profiled_graph)
    svg = m.graph_svg()
    assert svg is not None and svg != profiled_graph.svg()
    _check_heat_map(svg, profiled_graph)
    assert _boot(m.page())["hash"] == profiled_graph.short_hash()
    url = m.serve(0)
    try:
        with urllib.request.urlopen(url + "/graph.svg", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("image/svg+xml")
            assert r.read().decode() == svg
        with urllib.request.urlopen(url + "/", timeout=10) as r:
            assert _boot(r.read().decode())["has_svg"] is True
    finally:
        m.stop()
    m.log(0, 0.1, profiled_graph.latest_metrics() or {"loss": 1.0})
    profiled_graph(torch.randn(8, 4))  # a newer profile: finish_with draws this one
    m.save_html(tmp_path / "report.html")
    m.finish_with(profiled_graph)
    baked = _boot((tmp_path / "report.html").read_text())["svg"]
    _check_heat_map(baked, profiled_graph)
    assert baked == profiled_graph.svg_with_profile()


def test_real_graph_without_profile_falls_back_to_plain(caplog: pytest.LogCaptureFixture) -> None:
    fg = pytest.importorskip("flodl_graph")
    g = fg.FlowBuilder(torch.nn.Linear(2, 2)).through(torch.nn.Linear(2, 1)).build()
    m = _monitor()
    with caplog.at_level(logging.WARNING, logger="flodl.monitor"):
        m.watch_profiled(g)
    assert m.graph_svg() == g.svg() and "#e74c3c" not in (m.graph_svg() or "")
    assert "no profile yet" in caplog.text
