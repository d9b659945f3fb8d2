"""``graph.end_step()`` / ``graph.end_epoch()``: truncated BPTT on forward-ref state against a
hand-written recurrence, timings buffered per step while profiling, and the whole tree flushed
at the end of an epoch."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_graph import FlowBuilder, Graph, StateAdd

D = 5


def _rnn() -> tuple[Graph, nn.Linear, nn.Linear]:
    torch.manual_seed(0)
    inp, out = nn.Linear(3, D), nn.Linear(D, 1)
    g = (
        FlowBuilder(inp)
        .through(StateAdd())
        .using(["memory"])  # x_t + memory_{t-1}: a forward ref
        .through(nn.Tanh())
        .tag("memory")
        .through(out)
        .build()
    )
    return g, inp, out


def test_end_step_is_truncated_bptt_like_hand_written_pytorch() -> None:
    g, inp, out = _rnn()
    xs = torch.randn(4, 2, 3)
    params = [*inp.parameters(), *out.parameters()]
    graph_grads, hand_grads = [], []
    for step in range(len(xs)):
        g.zero_grad()
        g(xs[step]).pow(2).mean().backward()
        graph_grads.append([p.grad.clone() for p in params])
        g.end_step()
        assert g.step_count == step + 1
        assert g.tagged("memory").grad_fn is None  # the carried value is cut from its history
    memory = torch.zeros(2, D)
    for step in range(len(xs)):
        for p in params:
            p.grad = None
        h = torch.tanh(inp(xs[step]) + memory.detach())
        out(h).pow(2).mean().backward()
        hand_grads.append([p.grad.clone() for p in params])
        memory = h
    for ours, ref in zip(graph_grads, hand_grads, strict=True):
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_without_end_step_the_second_backward_reaches_a_freed_graph() -> None:
    g, _, _ = _rnn()
    xs = torch.randn(2, 2, 3)
    g(xs[0]).sum().backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        g(xs[1]).sum().backward()


def test_end_step_detaches_nested_graph_state() -> None:
    inner, _, _ = _rnn()
    outer = FlowBuilder(nn.Linear(3, 3)).through(inner).build()
    x = torch.randn(2, 3)
    outer(x).sum().backward()
    outer.end_step()
    assert inner._state["memory"] is not None and inner._state["memory"].grad_fn is None
    outer(x).sum().backward()  # no error: the nested state was detached too


def test_end_step_buffers_timings_only_while_profiling() -> None:
    g, _, _ = _rnn()
    x = torch.randn(2, 3)
    g(x)
    g.end_step()  # not profiling: nothing timed, nothing buffered, no error
    assert g.timings.latest_local() == {} and g.timings.collected("memory") == []
    g.enable_profiling()
    for _ in range(3):
        g(x)
        g.end_step()
    assert len(g.timings.collected("memory")) == 3
    assert all(v > 0 for v in g.timings.collected("memory"))
    g.end_epoch()
    assert g.timings.collected("memory") == []
    assert len(g.timing_trend("memory")) == 1
    assert g.timing_trend("memory").latest() > 0


def test_end_epoch_flushes_the_whole_tree_and_counts() -> None:
    enc = FlowBuilder(nn.Linear(3, 3)).tag("h").label("enc").build()
    g = FlowBuilder(enc).through(nn.Linear(3, 1)).tag("y").build()
    for epoch in range(3):
        for v in (1.0, 2.0, 3.0):
            g.record("loss", v + epoch)
            g.record_at("enc.aux", 10.0 * v)
        g.end_epoch()
        assert g.epoch_count == epoch + 1
    assert g.trend("loss").values() == [2.0, 3.0, 4.0]
    assert g.trend_at("enc.aux").values() == [20.0, 20.0, 20.0]
    assert g.latest_metrics() == {"loss": 4.0, "enc.aux": 20.0}
    assert g.flush_count == 3
    g.end_epoch()  # nothing recorded: counted as an epoch, no history point added
    assert g.epoch_count == 4 and g.flush_count == 3 and len(g.trend("loss")) == 3
