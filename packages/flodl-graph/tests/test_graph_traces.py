"""graph.traces / graph.last_trace / LossContext: loop traces after a forward, through the tree."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_core import ConfigError, PathError
from flodl_graph import FlowBuilder, LearnedHalt, LoopBody, LossContext, TraceEmit

MAX_ITER = 8


class Refine(LoopBody):
    """state + sigmoid(lin(state)) (the state grows every step); publishes the halting
    probability of the new state, the ponder cost of adaptive computation time."""

    def __init__(self, halt: LearnedHalt) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.halt = halt  # the loop's own condition: its score is also a trace

    def step(self, state, refs, emit: TraceEmit):
        nxt = state + torch.sigmoid(self.lin(state))
        emit.publish("halt_p", torch.sigmoid(self.halt(nxt)).mean())
        return nxt


def _model(bias: float = -3.0, label: str | None = None):
    torch.manual_seed(0)
    halt = LearnedHalt(4)
    with torch.no_grad():  # the score sum(state)/4 - 3 grows with the state: halts mid-way
        halt.proj.weight.fill_(0.25)
        halt.proj.bias.fill_(bias)
    enc, body, head = nn.Linear(4, 4), Refine(halt), nn.Linear(4, 2)
    fb = FlowBuilder(enc).loop_body(body).while_cond(halt, MAX_ITER).tag("refined").through(head)
    g = (fb.label(label) if label else fb).build()
    return g, enc, body, head, halt


def _hand(enc, body, head, halt, x):
    h, probs = enc(x), []
    for _ in range(MAX_ITER):
        if float(halt(h).detach().reshape(-1)[0]) > 0:
            break
        h = h + torch.sigmoid(body.lin(h))
        probs.append(torch.sigmoid(halt(h)).mean())
    return head(h), probs


def test_while_loop_with_a_learned_halt_traces_every_iteration() -> None:
    g, enc, body, head, halt = _model()
    x = torch.randn(2, 4)
    out = g(x)
    want, probs = _hand(enc, body, head, halt, x)
    assert 0 < len(probs) < MAX_ITER  # it halted on the learned score, not on max_iter
    torch.testing.assert_close(out, want)
    got = g.traces("halt_p")
    assert len(got) == len(probs)
    torch.testing.assert_close(torch.stack(got), torch.stack(probs))
    torch.testing.assert_close(g.last_trace("halt_p"), probs[-1])


def test_traces_reach_a_loss_and_train_the_halt() -> None:
    g, enc, body, head, halt = _model()
    x, y = torch.randn(2, 4), torch.randn(2, 2)

    def loss_fn(ctx: LossContext) -> torch.Tensor:
        ponder = torch.stack(ctx.traces["halt_p"]).sum()
        return nn.functional.mse_loss(ctx.output, y) + 0.1 * ponder

    out = g(x)
    ctx = LossContext.of(g, out)
    assert set(ctx.tags) == {"refined"} and ctx.output is out
    loss_fn(ctx).backward()
    # The halting decision carries no gradient; the published probabilities do.
    assert halt.proj.weight.grad is not None and halt.proj.weight.grad.abs().sum() > 0
    assert body.lin.weight.grad is not None

    hand_out, probs = _hand(enc, body, head, halt, x)
    for p in g.parameters():
        p.grad = None
    (nn.functional.mse_loss(hand_out, y) + 0.1 * torch.stack(probs).sum()).backward()
    want = halt.proj.weight.grad.clone()
    for p in g.parameters():
        p.grad = None
    loss_fn(LossContext.of(g, g(x))).backward()
    torch.testing.assert_close(halt.proj.weight.grad, want)


def test_loss_context_of_needs_the_graph_first() -> None:
    g = _model()[0]
    out = g(torch.randn(2, 4))
    with pytest.raises(ConfigError, match=r"graph must be a flodl Graph, got Tensor \(the arg"):
        LossContext.of(out, g)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"graph must be a flodl Graph, got NoneType$"):
        LossContext.of(None, out)  # type: ignore[arg-type]


def test_a_loop_that_halts_at_once_has_empty_traces() -> None:
    g = _model(bias=5.0)[0]
    assert g.traces("halt_p") == [] and g.last_trace("halt_p") is None
    g(torch.randn(1, 4))
    assert g.traces("halt_p") == [] and g.last_trace("halt_p") is None


def test_traces_of_a_labeled_child_through_the_tree() -> None:
    inner = _model(label="refiner")[0]
    g = FlowBuilder(nn.Linear(4, 4)).through(inner).build()
    g(torch.randn(2, 4))
    assert len(g.traces("refiner.halt_p")) == len(inner.traces("halt_p")) > 0
    with pytest.raises(PathError, match=r"no child graph 'nope'.*valid names here: refiner"):
        g.traces("nope.halt_p")
    with pytest.raises(PathError, match="no loop whose body is a LoopBody"):
        g.traces("halt_p")


def test_two_loops_publishing_one_name_are_ambiguous() -> None:
    halt = LearnedHalt(4)
    g = (FlowBuilder(nn.Linear(4, 4)).loop_body(Refine(halt)).for_n(1)
         .loop_body(Refine(halt)).for_n(2).build())  # fmt: skip
    g(torch.randn(1, 4))
    with pytest.raises(ConfigError, match=r"'halt_p' is published by two loops.*loop_2 and loop_3"):
        g.traces("halt_p")


def test_bad_trace_names() -> None:
    g = _model()[0]
    with pytest.raises(ConfigError, match="a trace name must be a non-empty string"):
        g.traces("")
    plain = FlowBuilder(nn.Linear(2, 2)).loop_body(nn.Linear(2, 2)).for_n(2).build()
    with pytest.raises(PathError, match=r"derive the loop body from flodl_graph\.LoopBody"):
        plain.last_trace("x")
