"""Observation: collect/record/flush, trends by tag and by path, tree metrics, exports."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from flodl_core import ConfigError, Observable, PathError, ShapeError
from flodl_graph import FlowBuilder, Graph, MergeOp, Reduce, TrendGroup

# --- the conftest tree with a plain 'read' (no internal tag); ``x`` comes from conftest -----


@pytest.fixture
def model(tree) -> Graph:
    torch.manual_seed(0)
    scan = tree.scan()
    read = FlowBuilder(nn.Linear(8, 3)).tag("confidence").label("read").build()
    encoder = FlowBuilder(scan).through(read).label("encoder").build()
    b = FlowBuilder(encoder).through(nn.Linear(3, 2)).tag("head")
    return b.fork(tree.Mean()).tag("score").build()


# --- batch level -----------------------------------------------------------------------------


def test_collect_scalar_tag_and_flush_mean(model: Graph, x: torch.Tensor) -> None:
    seen = []
    for k in range(3):
        model(x * (k + 1))
        model.collect("score")
        seen.append(model.tagged("score").item())
    assert model.collected("score") == pytest.approx(seen)
    model.flush()
    assert model.trend("score").values() == pytest.approx([np.mean(seen)])
    assert model.collected("score") == []


def test_collect_non_scalar_says_use_collect_with(model: Graph, x: torch.Tensor) -> None:
    model(x)
    with pytest.raises(ShapeError, match=r"shape \(5, 2\).*collect_with\(\['head'\]"):
        model.collect(["head"])


@pytest.mark.parametrize("reduce", list(Reduce))
def test_collect_with_each_reduction(model: Graph, x: torch.Tensor, reduce: Reduce) -> None:
    out = model(x).detach()
    model.collect_with(["head"], reduce)
    ref = {
        Reduce.MEAN: out.mean(),
        Reduce.SUM: out.sum(),
        Reduce.MAX: out.max(),
        Reduce.MIN: out.min(),
        Reduce.NORM: torch.linalg.vector_norm(out),
    }[reduce].item()
    assert model.collected("head") == [pytest.approx(ref, rel=1e-6)]


def test_collect_errors_and_skips(model: Graph, x: torch.Tensor) -> None:
    model.collect("score")  # no forward yet: not produced, silently skipped
    assert model.collected("score") == []
    model(x)
    with pytest.raises(PathError, match="no tag named 'nope'") as e:
        model.collect(["nope"])
    assert "head" in e.value.valid
    with pytest.raises(ConfigError, match="Reduce member"):
        model.collect_with("head", "mean")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be strings"):
        model.collect([3])  # type: ignore[list-item]


def test_tag_groups_expand(tree) -> None:
    g = (
        FlowBuilder(nn.Linear(2, 2))
        .split([tree.Mean(), tree.Mean()])
        .tag_group("branch")
        .merge(MergeOp.ADD)
        .build()
    )
    g(torch.ones(3, 2))
    g.collect("branch")
    assert [n for n in ("branch", "branch_0", "branch_1") if g.collected(n)] == [
        "branch_0",
        "branch_1",
    ]
    g.flush("branch")
    assert len(g.trends("branch")) == 2


def test_record_values_scalars_and_tensors(model: Graph) -> None:
    model.record("loss", [1.0, 2.0])
    model.record("loss", torch.tensor([3.0, 6.0]))
    model.record_scalar("loss", torch.tensor(8.0))
    model.record_scalar("acc", 1)
    assert model.collected("loss") == [1.0, 2.0, 3.0, 6.0, 8.0]
    model.flush(["loss"])
    assert model.trend("loss").values() == [4.0]
    assert model.collected("acc") == [1.0]  # not in the flushed list: still buffered


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda g: g.record("a.b", 1.0), "record_at"),
        (lambda g: g.record("", 1.0), "non-empty"),
        (lambda g: g.record("loss", "1.0"), "expected a number"),
        (lambda g: g.record("loss", [1.0, "x"]), "is not a number"),
        (lambda g: g.record_scalar("loss", [1.0, 2.0]), "expected one value"),
    ],
)
def test_record_bad_input(model: Graph, call, match: str) -> None:
    with pytest.raises((ConfigError, ShapeError), match=match):
        call(model)
    assert model.collected("loss") == []


# --- epoch level and trends ------------------------------------------------------------------


def test_flush_history_and_trend_math_match_numpy(model: Graph) -> None:
    rng = np.random.default_rng(0)
    epochs = [rng.normal(loc=2.0 - 0.1 * e, scale=0.05, size=4) for e in range(8)]
    for vals in epochs:
        model.record("loss", vals.tolist())
        model.flush()
    means = np.array([v.mean() for v in epochs])
    t = model.trend("loss")
    assert t.values() == pytest.approx(means.tolist())
    x = np.arange(5.0)
    ref = np.polyfit(x, means[-5:], 1)[0]
    assert t.slope(5) == pytest.approx(ref, rel=1e-9)
    assert t.improving(5)
    assert t.converged(8, float(np.var(means)) * 1.01)
    assert not t.converged(8, float(np.var(means)) * 0.99)
    assert model.flush_count == 8


def test_trend_of_unknown_name_is_an_error(model: Graph) -> None:
    with pytest.raises(PathError, match="no metric or tag named 'los'"):
        model.trend("los")
    assert len(model.trend("head")) == 0  # a tag with no history yet: empty trend


def test_trends_group_and_reset(model: Graph) -> None:
    for e in range(4):
        model.record_scalar("a", 1.0 - e)
        model.record_scalar("b", float(e))
        model.flush()
    group = model.trends(["a", "b"])
    assert isinstance(group, TrendGroup)
    assert group.any_improving() and not group.all_improving()
    assert group.mean_slope() == pytest.approx(0.0)
    model.reset_trend(["a"])
    assert len(model.trend("b")) == 4
    with pytest.raises(PathError):
        model.trend("a")
    model.reset_trend()
    assert model.latest_metrics() == {}


def test_flush_with_nothing_buffered_is_not_an_epoch(model: Graph) -> None:
    model.flush()
    assert model.flush_count == 0


def test_eta(model: Graph, monkeypatch: pytest.MonkeyPatch) -> None:
    import flodl_graph._metrics as obs

    clock = iter([100.0, 110.0, 120.0])  # start, flush 1, flush 2
    monkeypatch.setattr(obs.time, "perf_counter", lambda: next(clock))
    assert model.eta(10) == 0.0
    model.record_scalar("loss", 1.0)
    model.flush()
    model.record_scalar("loss", 1.0)
    model.flush()
    assert model.eta(10) == pytest.approx(20.0 / 2 * 8)
    assert model.eta(2) == 0.0
    with pytest.raises(ConfigError, match="total_epochs"):
        model.eta(-1)


# --- across the tree -------------------------------------------------------------------------


def test_flush_recurses_and_latest_metrics_are_dotted(model: Graph) -> None:
    model.record_at("encoder.scan.loss", [0.5, 1.5])
    model.record_at("encoder.read.accuracy", 0.75)
    model.record_scalar("total_loss", 2.0)
    model.flush()  # one call flushes the whole tree
    assert model.latest_metrics() == {
        "total_loss": 2.0,
        "encoder.scan.loss": 1.0,
        "encoder.read.accuracy": 0.75,
    }
    assert model.subgraph("encoder.scan").latest_metrics() == {"loss": 1.0}
    assert model.latest_metrics_local() == {"total_loss": 2.0}
    assert model.trend_at("encoder.scan.loss").values() == [1.0]
    assert isinstance(model, Observable)


def test_flush_local_leaves_children_buffered(model: Graph) -> None:
    model.record_at("encoder.scan.loss", 1.0)
    model.record_scalar("total", 1.0)
    model.flush_local()
    assert model.latest_metrics() == {"total": 1.0}
    model.flush()
    assert model.latest_metrics() == {"total": 1.0, "encoder.scan.loss": 1.0}


def test_child_metrics_count_as_an_epoch_for_the_root(model: Graph) -> None:
    model.record_at("encoder.scan.loss", 1.0)
    model.flush()
    assert model.flush_count == 1


def test_collect_at_and_tagged_at(model: Graph, x: torch.Tensor) -> None:
    assert model.tagged_at("encoder.scan.hidden") is None  # nothing computed yet
    model(x)
    hidden = model.tagged_at("encoder.scan.hidden")
    assert hidden is not None and hidden.shape == (5, 8)
    assert torch.equal(hidden, model.subgraph("encoder.scan").tagged("hidden"))
    model.collect_at(["score"])
    assert model.collected("score") == [model.tagged("score").item()]
    with pytest.raises(ShapeError, match="collect_with"):
        model.collect_at("encoder.scan.hidden")


def test_cross_boundary_errors(model: Graph, x: torch.Tensor) -> None:
    model(x)
    with pytest.raises(PathError, match="internal"):
        model.tagged_at("encoder.scan._raw")
    with pytest.raises(PathError, match="internal"):
        model.collect_at("encoder.scan._raw")
    with pytest.raises(PathError, match="names a subgraph, expected a tag"):
        model.tagged_at("encoder.scan")
    with pytest.raises(PathError, match="names a subgraph, expected a tag"):
        model.collect_at(["encoder"])
    with pytest.raises(PathError, match="valid names here: read, scan"):
        model.record_at("encoder.nope.loss", 1.0)
    with pytest.raises(PathError, match=r"ends with '\.'"):
        model.record_at("encoder.scan.", 1.0)
    with pytest.raises(PathError, match="no metric or tag named 'loss' in graph 'scan'"):
        model.trend_at("encoder.scan.loss")


# --- the seed's training-control loop, as written --------------------------------------------


def test_seed_early_stopping_and_lr_decay_loop() -> None:
    torch.manual_seed(0)
    graph = FlowBuilder(nn.Linear(2, 8)).through(nn.Tanh()).tag("hidden")
    graph = graph.through(nn.Linear(8, 1)).build()
    xs = torch.randn(64, 2, generator=torch.Generator().manual_seed(2))
    ys = xs.sum(dim=1, keepdim=True)
    optimizer = torch.optim.SGD(graph.parameters(), lr=0.1)
    decays, stopped_at = 0, None
    for epoch in range(200):
        for i in range(0, 64, 16):
            pred = graph(xs[i : i + 16])
            loss = nn.functional.mse_loss(pred, ys[i : i + 16])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            graph.collect_with(["hidden"], Reduce.MEAN)
            graph.record_scalar("loss", loss.item())
        graph.flush(["hidden", "loss"])
        if graph.trend("loss").stalled(5, 1e-4):
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
            decays += 1
        if graph.trend("loss").converged(5, 1e-5):
            stopped_at = epoch
            break
    assert stopped_at is not None and stopped_at < 199 and decays >= 1
    assert len(graph.trend("hidden")) == stopped_at + 1
    assert graph.trend("loss").latest() < graph.trend("loss").values()[0]


# --- exports ---------------------------------------------------------------------------------


def test_export_trends_and_plot_html(model: Graph, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing has been flushed"):
        model.plot_html(tmp_path / "p.html")
    with pytest.raises(ConfigError, match="nothing has been flushed"):
        model.export_trends(tmp_path / "t.csv")
    for e in range(3):
        model.record_scalar("loss", 1.0 / (e + 1))
        if e > 0:
            model.record_at("encoder.scan.loss", float(e))
        model.flush()
    model.export_trends(tmp_path / "t.csv")
    rows = list(csv.reader((tmp_path / "t.csv").read_text().splitlines()))
    assert rows[0] == ["epoch", "loss", "encoder.scan.loss"]
    assert [r[0] for r in rows[1:]] == ["1", "2", "3"]
    assert float(rows[3][1]) == pytest.approx(1 / 3)
    model.export_trends(tmp_path / "sel.csv", ["encoder.scan.loss"])
    assert (tmp_path / "sel.csv").read_text().splitlines()[0] == "epoch,encoder.scan.loss"
    model.plot_html(tmp_path / "p.html", ["loss", "encoder.scan.loss"])
    html = (tmp_path / "p.html").read_text()
    assert "encoder.scan.loss" in html and "<canvas" in html


@pytest.mark.parametrize(
    "call",
    [
        lambda g: g.collect(None),
        lambda g: g.collect_at(3),
        lambda g: g.flush(1),
        lambda g: g.trends(None),
        lambda g: g.reset_trend(0),
        lambda g: g.timings.collect(None),
    ],
)
def test_names_that_are_not_names_are_refused(model: Graph, x: torch.Tensor, call) -> None:
    model(x)
    with pytest.raises(ConfigError, match="expected a metric or tag name or a list of them"):
        call(model)


def test_trend_of_a_dotted_name_points_to_trend_at(model: Graph) -> None:
    model.record_at("encoder.scan.loss", 1.0)
    model.record_scalar("score", 2.0)  # also a tag: listed once among the valid names
    model.flush()
    assert "encoder.scan.loss" in model.latest_metrics()
    with pytest.raises(PathError, match=r"use trend_at\('encoder.scan.loss'\)") as e:
        model.trend("encoder.scan.loss")
    assert e.value.valid.count("score") == 1
    assert model.trend_at("encoder.scan.loss").values() == [1.0]


def test_plot_html_title_must_be_a_string(model: Graph, tmp_path: Path) -> None:
    model.record_scalar("loss", 1.0)
    model.flush()
    with pytest.raises(ConfigError, match=r"metrics\.plot_html: title must be a str, got int"):
        model.plot_html(tmp_path / "p.html", title=3)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_timings_of_an_unprofiled_subgraph_say_profiling_is_per_graph(
    model: Graph, x: torch.Tensor
) -> None:
    model.enable_profiling()
    model(x)
    model.timings.collect()  # the root's own nodes are timed
    node = model.subgraph("encoder").nodes[0].name
    with pytest.raises(ConfigError, match="graph 'encoder' is not profiled; call enable_profiling"):
        model.timings.collect_at(f"encoder.{node}")
    encoder = model.subgraph("encoder")
    encoder.enable_profiling()
    with pytest.raises(ConfigError, match="'encoder' is profiled but has not run a forward"):
        encoder.viz.dot_with_profile()
    model(x)
    model.timings.collect_at(f"encoder.{node}")
    assert len(encoder.timings.collected(node)) == 1
