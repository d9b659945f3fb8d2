"""The node protocol: a composite node emits its own statements, inlined by the graph and
compiled for standalone use, so both paths run one implementation."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from torch import nn

from flodl_core import BuildError, ConfigError, ShapeError
from flodl_graph import (
    NODE_KINDS,
    ArgmaxSelector,
    FixedSelector,
    FlowBuilder,
    LearnedHalt,
    NodeKind,
    SoftmaxRouter,
    ThresholdHalt,
)
from flodl_graph.nodes import CompositeNode, EmitContext, Gate, Loop, Map, Switch


class Refd(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)

    def forward_named(self, x, refs):
        return torch.tanh(self.lin(x) + refs["ctx"])


def _nodes() -> list[tuple[str, CompositeNode]]:
    torch.manual_seed(0)
    lins = [nn.Linear(4, 4) for _ in range(3)]
    return [
        ("for", Loop(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), "for", 3)),
        ("while", Loop(nn.Linear(4, 4), "while", 5, ThresholdHalt(0.5))),
        ("until", Loop(nn.Linear(4, 4), "until", 5, LearnedHalt(4))),
        ("gate", Gate(SoftmaxRouter(4, 3), lins)),
        ("switch", Switch(ArgmaxSelector(4, 2), [nn.Linear(4, 4), nn.Linear(4, 4)])),
        ("each", Map(nn.Linear(4, 4), "each")),
        ("batched", Map(nn.Linear(4, 4), "each", batched=True)),
        ("slices", Map(nn.Linear(2, 3), "slices", n=2)),
    ]


@pytest.mark.parametrize(("name", "node"), _nodes(), ids=[n for n, _ in _nodes()])
def test_standalone_forward_equals_the_inlined_graph_code(name: str, node: CompositeNode) -> None:
    g = FlowBuilder(nn.Identity()).through(node).build()
    x = torch.randn(3, 4)
    torch.testing.assert_close(node(x), g(x), atol=0, rtol=0)
    # The graph inlines exactly what the node emits for its id and module expression.
    nid = g.nodes[1].id
    want = node.emit(EmitContext(nid, f"_m[{nid!r}]"), nid, ["identity_1"])
    body = [line.strip() for line in g.code.splitlines()]
    start = body.index(want[0].strip())
    assert body[start : start + len(want)] == [w.strip() for w in want]


@pytest.mark.parametrize("cls", [Loop, Gate, Switch])
def test_standalone_refs_reach_the_refs_target(cls) -> None:
    torch.manual_seed(1)
    x, ctx = torch.randn(2, 4), torch.randn(2, 4)
    if cls is Loop:
        body = Refd()
        node = Loop(body, "for", 2)
        h = x
        for _ in range(2):
            h = body.forward_named(h, {"ctx": ctx})
        want = h
    elif cls is Gate:
        router, experts = SoftmaxRouter(4, 2), [nn.Linear(4, 4), nn.Linear(4, 4)]
        node = Gate(router, experts)
        w = router(x + ctx)
        want = w[:, :1] * experts[0](x) + w[:, 1:] * experts[1](x)
    else:
        branches = [nn.Linear(4, 4), nn.Linear(4, 4)]
        node = Switch(ArgmaxSelector(4, 2), branches)
        want = branches[int(node.router(x + ctx))](x)
    torch.testing.assert_close(node.forward_named(x, {"ctx": ctx}), want, atol=1e-6, rtol=0)


def test_map_takes_no_refs_standalone() -> None:
    with pytest.raises(ConfigError, match="map node takes no refs"):
        Map(nn.Linear(4, 4), "each")(torch.randn(2, 4), {"ctx": torch.randn(2, 4)})


def test_standalone_errors_name_the_node_and_show_the_statement() -> None:
    sw = Switch(FixedSelector(3), [nn.Identity(), nn.Identity()], node="route")
    with pytest.raises(ConfigError, match="route: the selector chose branch 3"):
        sw(torch.randn(1, 2))
    with pytest.raises(ShapeError, match="map: map"):
        Map(nn.Identity(), "slices", n=3)(torch.randn(2, 4))


def test_a_one_expert_gate_stacks_a_tuple() -> None:
    expert = nn.Linear(3, 3)
    gate = Gate(nn.Sequential(nn.Linear(3, 1), nn.Sigmoid()), [expert])
    x = torch.randn(2, 3)
    torch.testing.assert_close(gate(x), gate.router(x) * expert(x))


class Twice(CompositeNode):
    """A node kind written as one file would be: ``out = body(body(x))``."""

    kind = NodeKind.MODULE

    def __init__(self, body: nn.Module) -> None:
        super().__init__()
        self.body = body
        self.node = "twice"

    def emit(self, ctx: EmitContext, out: str, args: Sequence[str]) -> list[str]:
        b = ctx.tmp("b")
        return [f"{b} = {ctx.sub('body')}", f"{out} = {b}({b}({args[0]}))"]


def test_a_new_node_kind_needs_only_its_class() -> None:
    lin = nn.Linear(3, 3)
    g = FlowBuilder(nn.Identity()).through(Twice(lin)).build()
    x = torch.randn(2, 3)
    assert "_b_twice_2 = _m['twice_2']._modules['body']" in g.code
    torch.testing.assert_close(g(x), lin(lin(x)))
    torch.testing.assert_close(Twice(lin)(x), lin(lin(x)))
    with pytest.raises(BuildError, match=r"twice_2 \(module\) takes no refs"):
        FlowBuilder(nn.Identity()).tag("t").through(Twice(lin)).using(["t"]).build()


def test_node_kinds_are_an_enum_that_reads_as_strings() -> None:
    assert NodeKind.LOOP == "loop" and f"{NodeKind.GATE}" == "gate" and str(NodeKind.MAP) == "map"
    assert tuple(k.value for k in NodeKind) == NODE_KINDS
    assert {"loop": 1}[NodeKind.LOOP] == 1
    g = FlowBuilder().loop_body(nn.Linear(2, 2)).for_n(2).build()
    assert [n.kind for n in g.nodes] == [NodeKind.INPUT, NodeKind.LOOP]
    assert all(isinstance(n.kind, NodeKind) for n in g.nodes)


def test_loop_mode_lives_on_the_node_only() -> None:
    g = FlowBuilder().loop_body(nn.Linear(2, 2)).until_cond(ThresholdHalt(0.0), 4).build()
    loop = g.nodes[1].module
    assert isinstance(loop, Loop) and (loop.mode, loop.count) == ("until", 4)
    assert g._plan.options == {}
    assert "loop until_cond (max 4)" in repr(g)
