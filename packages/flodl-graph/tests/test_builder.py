"""FlowBuilder: every linear construct against hand-written PyTorch, ids, kinds and errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_core import BuildError
from flodl_graph import FixedSelector, FlowBuilder, MergeOp, NodeKind, SoftmaxRouter, StateAdd


def lin(i: int = 8, o: int = 8) -> nn.Linear:
    return nn.Linear(i, o)


def test_through_chain_matches_sequential(parity) -> None:
    mods = [lin(4, 16), nn.GELU(), nn.LayerNorm(16), lin(16, 2)]
    g = FlowBuilder(mods[0]).through(mods[1]).through(mods[2]).through(mods[3]).build()
    seq = nn.Sequential(*mods)
    parity(g, seq, list(seq.parameters()), torch.randn(5, 4))
    assert [k for k, _ in g.named_parameters()] == [
        "linear_1.weight", "linear_1.bias", "layer_norm_3.weight", "layer_norm_3.bias",
        "linear_4.weight", "linear_4.bias",
    ]  # fmt: skip


def test_identity_start_and_empty_graph() -> None:
    x = torch.randn(3, 2)
    with pytest.raises(BuildError, match=r"the graph is empty .* FlowBuilder\(nn.Identity\(\)\)"):
        FlowBuilder().build()
    with pytest.raises(BuildError, match="the graph is empty"):
        FlowBuilder().input(["ctx"]).build()
    g = FlowBuilder().through(nn.ReLU()).build()
    assert g.nodes[0].kind == "input" and g.nodes[0].module is None
    assert g(x).equal(x.relu())
    assert FlowBuilder(nn.Identity()).build()(x) is x


@pytest.mark.parametrize("method", ["build", "through", "tag"])
def test_unfinished_loop_or_map_names_the_fix(method: str) -> None:
    with pytest.raises(BuildError, match=r"call for_n\(n\), while_cond\(...\) or until_cond"):
        getattr(FlowBuilder(nn.Linear(2, 2)).loop_body(nn.Linear(2, 2)), method)
    with pytest.raises(BuildError, match=r"call each\(\), over\(tag\) or slices\(n\)"):
        getattr(FlowBuilder(nn.Linear(2, 2)).map(nn.Linear(2, 2)), method)
    with pytest.raises(AttributeError, match="no attribute 'nonsense'"):
        FlowBuilder(nn.Linear(2, 2)).loop_body(nn.Linear(2, 2)).nonsense  # noqa: B018


def test_also_is_residual(parity) -> None:
    a, m, b = lin(4, 8), lin(), lin(8, 2)
    g = FlowBuilder(a).also(m).through(b).build()
    parity(g, lambda x: b(a(x) + m(a(x))), [*a.parameters(), *m.parameters()], torch.randn(3, 4))
    kinds = [(n.id, n.kind) for n in g.nodes]
    assert kinds == [("linear_1", "module"), ("linear_2", "also"), ("add_3", "add"),
                     ("linear_4", "module")]  # fmt: skip
    assert g.nodes[2].inputs == ("linear_1", "linear_2")


def test_also_with_projected_skip(parity) -> None:
    skip, main = lin(4, 6), nn.Sequential(lin(4, 6), nn.Tanh())
    g = FlowBuilder().also_with(skip, main).build()
    parity(g, lambda x: skip(x) + main(x), [*skip.parameters(), *main.parameters()],
           torch.randn(3, 4))  # fmt: skip


def test_fork_keeps_stream_and_tag_names_side_output(parity) -> None:
    a, side, b = lin(4, 8), lin(8, 3), lin(8, 2)
    g = FlowBuilder(a).fork(side).tag("side").through(b).build()
    x = torch.randn(2, 4)
    parity(g, lambda x: b(a(x)), [*a.parameters(), *b.parameters()], x)
    torch.testing.assert_close(g.tagged("side"), side(a(x)))
    assert g.tag_node("side").kind == "fork"
    assert "side.weight" in dict(g.named_parameters())


@pytest.mark.parametrize("op", [MergeOp.ADD, MergeOp.MEAN, "mean"])
def test_split_merge(parity, op) -> None:
    a, bs = lin(4, 8), [lin(), nn.Sequential(lin(), nn.ReLU()), lin()]
    g = FlowBuilder(a).split(bs).merge(op).build()

    def hand(x):
        h = a(x)
        s = bs[0](h) + bs[1](h) + bs[2](h)
        return s / 3 if MergeOp(op) is MergeOp.MEAN else s

    parity(g, hand, [p for m in (a, *bs) for p in m.parameters()], torch.randn(3, 4))
    assert g.nodes[-1].kind == "merge" and len(g.nodes[-1].inputs) == 3


def test_tag_group_names_branches() -> None:
    bs = [lin(), lin()]
    g = FlowBuilder().split(bs).tag_group("head").merge(MergeOp.ADD).build()
    x = torch.randn(2, 8)
    g(x)
    assert g.tag_groups == {"head": ("head_0", "head_1")}
    torch.testing.assert_close(g.tagged("head_1"), bs[1](x))


class Scale(nn.Module):
    """forward_named(x, refs) = x * (1 + sum refs): a module that takes refs."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x)

    def forward_named(self, x, refs):
        return self.lin(x) * (1 + sum(refs.values()))


def test_using_backward_ref_and_split_targets(parity) -> None:
    a, s1, s2 = lin(4, 8), Scale(), Scale()
    g = FlowBuilder(a).tag("a").split([s1, s2]).using(["a"]).merge(MergeOp.ADD).build()

    def hand(x):
        h = a(x)
        return s1.lin(h) * (1 + h) + s2.lin(h) * (1 + h)

    params = [p for m in (a, s1, s2) for p in m.parameters()]
    parity(g, hand, params, torch.randn(3, 4))
    assert g.nodes[2].refs == ("a",) and g.nodes[2].forward_refs == ()


def test_using_after_also_feeds_the_inner_module(parity) -> None:
    a, s = lin(4, 8), Scale()
    g = FlowBuilder(a).tag("a").also(s).using(["a"]).build()
    parity(g, lambda x: a(x) + s.forward_named(a(x), {"a": a(x)}),
           [*a.parameters(), *s.parameters()], torch.randn(3, 4))  # fmt: skip


def test_aux_inputs_positional_and_keyword(parity) -> None:
    a, s = lin(4, 8), Scale()
    g = FlowBuilder(a).input(["ctx", "bias"]).through(s).using(["ctx", "bias"]).build()
    x, ctx, bias = torch.randn(3, 4), torch.randn(3, 8), torch.randn(3, 8)

    def hand(x, ctx, bias):
        return s.lin(a(x)) * (1 + ctx + bias)

    parity(g, hand, [*a.parameters(), *s.parameters()], x, ctx, bias)
    torch.testing.assert_close(g(x, bias=bias, ctx=ctx), g(x, ctx, bias))
    assert g.input_names == ("ctx", "bias")
    assert g.tagged("ctx") is not None and g.tag_node("ctx").kind == "input"
    with pytest.raises(TypeError, match="bias"):
        g(x, ctx)


def test_using_before_input_reads_the_current_value() -> None:
    g = FlowBuilder(StateAdd()).using(["ctx"]).input(["ctx"]).build()
    x, c = torch.ones(2, 3), torch.full((2, 3), 2.0)
    assert g(x, c).equal(x + c)
    assert g.nodes[0].forward_refs == ()


def test_node_ids_names_and_numeric_tags() -> None:
    g = (FlowBuilder(nn.LayerNorm(4)).through(nn.LSTMCell(4, 4)).tag("0")
         .through(nn.ReLU()).build())  # fmt: skip
    assert [n.id for n in g.nodes] == ["layer_norm_1", "lstm_cell_2", "relu_3"]
    assert [n.name for n in g.nodes] == ["layer_norm_1", "0", "relu_3"]
    assert "0.weight_ih" in dict(g.named_parameters())


# -- errors -----------------------------------------------------------------------------------


def errors_of(fb: FlowBuilder) -> list[str]:
    with pytest.raises(BuildError) as info:
        fb.build()
    return info.value.errors


def test_errors_are_collected_and_name_call_and_node() -> None:
    errs = errors_of(
        FlowBuilder(lin())
        .tag("a")
        .through(lin())
        .tag("a")  # duplicate tag
        .split([lin(), lin()])
        .through(lin())  # through on two streams
        .loop_body(lin())
        .for_n(0)  # bad count (and two streams)
    )
    assert len(errs) == 4, errs
    assert "tag('a')" in errs[0] and "already on linear_1" in errs[0] and "linear_2" in errs[0]
    assert "through(Linear)" in errs[1] and "single stream" in errs[1]
    assert "for_n(0)" in errs[2] and "n must be an int >= 1" in errs[2]
    assert "open streams" in errs[3] and "merge" in errs[3]


@pytest.mark.parametrize(
    ("chain", "needle"),
    [
        (lambda: FlowBuilder(lin()).through(3), "expected an nn.Module, got int"),
        (lambda: FlowBuilder("x"), "expected an nn.Module as the first node"),
        (lambda: FlowBuilder(lin()).split([lin()]), "at least 2 branches"),
        (lambda: FlowBuilder(lin()).split(lin()), "expected a list of branches"),
        (lambda: FlowBuilder(lin()).merge(MergeOp.ADD), "requires multiple streams"),
        (lambda: FlowBuilder(lin()).split([lin(), lin()]).merge("max"), "unknown merge op"),
        (lambda: FlowBuilder(lin()).tag("a.b"), "no dots"),
        (lambda: FlowBuilder(lin()).tag(""), "invalid tag"),
        (lambda: FlowBuilder(lin()).tag(3), "must be a str"),
        (lambda: FlowBuilder(lin()).split([lin(), lin()]).tag("t"), "single stream"),
        (lambda: FlowBuilder(lin()).tag_group("g"), "at least 2 streams"),
        (
            lambda: FlowBuilder(lin()).tag("g_0").split([lin(), lin()]).tag_group("g"),
            "collides with an existing tag",
        ),
        (
            lambda: (
                FlowBuilder(lin())
                .split([lin(), lin()])
                .tag_group("g")
                .merge("add")
                .split([lin(), lin()])
                .tag_group("g")
            ),
            "already a tag group",
        ),
        (lambda: FlowBuilder(lin()).tag("c").input(["c"]), "conflicts with an existing tag"),
        (lambda: FlowBuilder(lin()).input(["2x"]), "Python identifier"),
        (lambda: FlowBuilder(lin()).input(["x"]), "cannot start with '_' or be one of"),
        (lambda: FlowBuilder(StateAdd()).using(["nope"]), "unresolved forward refs: 'nope'"),
        (lambda: FlowBuilder(lin()).using(["x.y"]), "no dots"),
        (lambda: FlowBuilder().using(["a"]), "using requires a preceding through"),
        (
            lambda: FlowBuilder(lin()).tag("a").through(lin()).using(["a"]),
            "linear_2 (Linear) does not support .using() refs; implement forward_named",
        ),
        (
            lambda: FlowBuilder(lin()).tag("a").split([lin(), lin()]).merge("add").using(["a"]),
            "merge_4 (merge) takes no refs",
        ),
        (
            lambda: FlowBuilder(StateAdd()).tag("a").through(StateAdd()).using(["a", "a"]),
            "already reads ref 'a'",
        ),
        (
            lambda: (
                FlowBuilder(lin())
                .split([lin(), lin()])
                .tag_group("g")
                .merge("add")
                .through(StateAdd())
                .using(["g"])
            ),
            "is a tag group",
        ),
        (lambda: FlowBuilder(lin()).internal("ghost"), "internal('ghost'): no such tag"),
        (lambda: FlowBuilder(StateAdd()).using(None), "using(None): expected a name or a list"),
        (lambda: FlowBuilder(StateAdd()).using(3), "using(3): expected a name or a list"),
        (lambda: FlowBuilder(lin()).input(None), "input(None): expected a name or a list"),
        (
            lambda: FlowBuilder(lin()).loop_body(lin()).while_cond(None, 3),  # type: ignore[arg-type]
            "while_cond(..., 3): expected an nn.Module, got NoneType",
        ),
        (
            lambda: FlowBuilder(lin()).loop_body(lin()).until_cond(None, 3),  # type: ignore[arg-type]
            "until_cond(..., 3): expected an nn.Module, got NoneType",
        ),
        (lambda: FlowBuilder(lin()).tag("forward"), "attribute of Graph"),
        (lambda: FlowBuilder(StateAdd()).also(StateAdd()).tag("s").using(["s"]), "cycle detected"),
    ],
)
def test_builder_error(chain, needle) -> None:
    errs = errors_of(chain())
    assert any(needle in e for e in errs), errs


def test_build_twice_is_an_error() -> None:
    fb = FlowBuilder(lin())
    fb.build()
    with pytest.raises(BuildError, match="already built"):
        fb.build()


def test_label_must_be_non_empty() -> None:
    assert "must not be empty" in errors_of(FlowBuilder(lin()).label(""))[0]


def test_dotted_label_fails_at_its_own_build() -> None:
    assert "contains '.'" in errors_of(FlowBuilder(lin()).label("enc.scan"))[0]


def test_unused_fork_still_runs() -> None:
    bn = nn.BatchNorm1d(8)
    g = FlowBuilder(lin()).fork(bn).through(lin()).build()
    g(torch.randn(4, 8))
    assert int(bn.num_batches_tracked) == 1


def test_append_returns_the_new_id() -> None:
    fb = FlowBuilder(nn.Linear(2, 2))
    nid = fb._append(NodeKind.MODULE, nn.ReLU(), ["linear_1"], lambda n: f"through({n})")
    assert nid == "relu_2"
    assert fb._append(NodeKind.INPUT, None, [], "input('ctx')", prefix="input_ctx") == "input_ctx_3"
    rec = fb._recording()
    assert [(n.id, n.kind, n.call) for n in rec.nodes[1:]] == [
        ("relu_2", NodeKind.MODULE, "through(relu_2)"),
        ("input_ctx_3", NodeKind.INPUT, "input('ctx')"),
    ]


def test_composite_nodes_know_their_id() -> None:
    g = (FlowBuilder(nn.Linear(2, 2)).gate(SoftmaxRouter(2, 2), [nn.Linear(2, 2)] * 2)
         .switch(FixedSelector(0), [nn.Linear(2, 2), nn.Linear(2, 2)])
         .loop_body(nn.Linear(2, 2)).for_n(2).map(nn.Linear(2, 2)).each().build())  # fmt: skip
    assert [(n.id, getattr(n.module, "node", None)) for n in g.nodes[1:]] == [
        ("gate_2", "gate_2"),
        ("switch_3", "switch_3"),
        ("loop_4", "loop_4"),
        ("map_5", "map_5"),
    ]
    assert [n.kind for n in g.nodes] == ["module", "gate", "switch", "loop", "map"]
