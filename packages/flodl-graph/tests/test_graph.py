"""Graph as an nn.Module: names, state_dict, modes, hooks, optimizers, copies, nesting, state."""

from __future__ import annotations

import copy
import linecache
import pickle

import pytest
import torch
from torch import nn

from flodl_core import BuildError, ConfigError, PathError
from flodl_graph import FlowBuilder, Graph, MergeOp, StateAdd


def mlp() -> Graph:
    return (FlowBuilder(nn.Linear(2, 8)).tag("encoder").through(nn.BatchNorm1d(8))
            .through(nn.Dropout(0.5)).through(nn.Linear(8, 2)).tag("head").build())  # fmt: skip


def test_parameters_state_dict_and_optim() -> None:
    g = mlp()
    assert list(g.state_dict()) == [
        "encoder.weight", "encoder.bias", "batch_norm1d_2.weight", "batch_norm1d_2.bias",
        "batch_norm1d_2.running_mean", "batch_norm1d_2.running_var",
        "batch_norm1d_2.num_batches_tracked", "head.weight", "head.bias",
    ]  # fmt: skip
    opt = torch.optim.Adam(g.parameters(), lr=0.1)
    before = g.head.weight.detach().clone()
    g(torch.randn(4, 2)).pow(2).mean().backward()
    opt.step()
    assert not g.head.weight.equal(before)
    fresh = mlp()
    fresh.load_state_dict(g.state_dict())
    g.eval()
    fresh.eval()
    x = torch.randn(3, 2)
    assert fresh(x).equal(g(x))


def test_train_eval_propagate() -> None:
    g = mlp()
    x = torch.ones(4, 2)
    g.eval()
    assert not g.get_submodule("dropout_3").training
    assert g(x).equal(g(x))
    g.train()
    assert g.get_submodule("batch_norm1d_2").training


def test_to_dtype_and_apply_and_children_call() -> None:
    g = mlp().to(torch.float64)
    assert g.head.weight.dtype == torch.float64
    assert g(torch.randn(3, 2, dtype=torch.float64)).dtype == torch.float64
    seen = []
    g.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Graph" and "Linear" in seen
    assert len(list(g.children())) == 4


def test_hooks_fire() -> None:
    g = mlp()
    calls = []
    g.register_forward_hook(lambda m, i, o: calls.append("graph"))
    g.head.register_forward_hook(lambda m, i, o: calls.append("head"))
    g.register_forward_pre_hook(lambda m, i: calls.append("pre"))
    g(torch.randn(2, 2))
    assert calls == ["pre", "head", "graph"]


def test_deepcopy_and_pickle_roundtrip() -> None:
    g = FlowBuilder(nn.Linear(3, 3)).through(StateAdd()).using(["m"]).tag("m").build()
    x = torch.randn(2, 3)
    g(x)
    for twin in (copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert twin.forward.__self__ is twin
        twin.reset_state()
        g.reset_state()
        assert twin(x).equal(g(x))
        assert twin.code == g.code


def test_code_is_readable_source() -> None:
    g = FlowBuilder(nn.Linear(2, 2)).also(nn.Linear(2, 2)).build()
    assert g.code.splitlines()[0] == "def forward(self, x):"
    assert "add_3 = linear_1 + linear_2" in g.code
    with pytest.raises(RuntimeError) as info:
        g(torch.randn(2, 5))
    # tracebacks point into the generated source
    tb = info.value.__traceback__
    while tb.tb_next:
        if tb.tb_frame.f_code is g._forward_fn.__code__:
            break
        tb = tb.tb_next
    assert tb.tb_frame.f_code is g._forward_fn.__code__
    assert linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip() == (
        "linear_1 = _m['linear_1'](x)"
    )


# -- forward refs -----------------------------------------------------------------------------


def recurrent() -> tuple[Graph, nn.Linear, nn.Linear]:
    enc, head = nn.Linear(3, 4), nn.Linear(4, 2)
    g = (FlowBuilder(enc).through(StateAdd()).using(["memory"]).tag("memory")
         .through(head).build())  # fmt: skip
    return g, enc, head


def test_forward_ref_carries_state_across_calls(parity) -> None:
    g, enc, head = recurrent()
    xs = torch.randn(4, 2, 3)

    def hand(seq):
        mem = torch.zeros(2, 4)
        outs = []
        for x in seq:
            mem = enc(x) + mem
            outs.append(head(mem))
        return torch.stack(outs)

    def run(seq):
        g.reset_state()
        return torch.stack([g(x) for x in seq])

    parity(run, hand, [*enc.parameters(), *head.parameters()], xs)
    assert g.nodes[1].forward_refs == ("memory",)


def test_reset_and_detach_state() -> None:
    g, _, _ = recurrent()
    x = torch.randn(2, 3)
    first = g(x)
    g(x).sum().backward()  # the second call backprops through the first: state kept history
    g.detach_state()
    assert g._state["memory"].grad_fn is None and g.tagged("memory").grad_fn is None
    g(x).sum().backward()
    g.reset_state()
    assert g(x).equal(first)


def test_detach_state_recurses_into_nested_graphs_and_modules() -> None:
    class Cell(nn.Module):
        detached = 0

        def forward(self, x):
            return x

        def detach_state(self):
            Cell.detached += 1

    inner, _, _ = recurrent()
    outer = FlowBuilder(inner).through(Cell()).build()
    outer(torch.randn(2, 3))
    assert inner._state["memory"].grad_fn is not None
    outer.detach_state()
    assert inner._state["memory"].grad_fn is None and Cell.detached == 1
    outer.reset_state()
    assert inner._state["memory"] is None


def test_state_follows_to() -> None:
    g, _, _ = recurrent()
    g(torch.randn(2, 3))
    g.to(torch.float64)
    assert g._state["memory"].dtype == torch.float64
    assert g(torch.randn(2, 3, dtype=torch.float64)).dtype == torch.float64


def test_forward_ref_zero_fill_has_no_grad() -> None:
    class Look(nn.Module):
        seen = None

        def forward(self, x):
            return x

        def forward_named(self, x, refs):
            Look.seen = refs["later"]
            return x + refs["later"]

    g = (
        FlowBuilder(nn.Linear(2, 2))
        .through(Look())
        .using(["later"])
        .through(nn.Tanh())
        .tag("later")
        .build()
    )
    g(torch.randn(3, 2))
    assert Look.seen.abs().sum() == 0 and not Look.seen.requires_grad


# -- tagged, structure ------------------------------------------------------------------------


def test_tagged_and_structure_accessors() -> None:
    g = (FlowBuilder(nn.Linear(2, 4)).tag("a").split([nn.Linear(4, 4), nn.Linear(4, 4)])
         .tag_group("b").merge(MergeOp.ADD).tag("_hidden").through(nn.Linear(4, 1))
         .internal("a").build())  # fmt: skip
    assert g.tagged("a") is None
    x = torch.randn(2, 2)
    g(x)
    torch.testing.assert_close(g.tagged("a"), g.a(x))
    assert g.tag_names == ("a", "b_0", "b_1", "_hidden")
    assert g.internal_tags == frozenset({"a", "_hidden"})
    assert g.tag_node("_hidden").kind == "merge" and g.tag_node("_hidden").internal
    assert g.levels == (("linear_1",), ("b_0", "b_1")[:0] or ("linear_2", "linear_3"),
                        ("merge_4",), ("linear_5",))  # fmt: skip
    assert [n.level for n in g.nodes] == [0, 1, 1, 2, 3]
    with pytest.raises(PathError, match=r"no tag 'zz'.*valid names here: _hidden, a, b_0"):
        g.tagged("zz")
    with pytest.raises(PathError):
        g.tag_node("zz")


def test_tagged_cleared_each_forward() -> None:
    from flodl_graph import FixedSelector

    sel = FixedSelector(0)
    g = (FlowBuilder().switch(sel, [FlowBuilder(nn.Identity()).build(), nn.Identity()])
         .tag("out").build())  # fmt: skip
    g(torch.ones(1))
    assert g.tagged("out") is not None
    g._tagged["stale"] = torch.ones(1)
    g(torch.ones(1))
    assert "stale" not in g._tagged


# -- nesting ----------------------------------------------------------------------------------


def test_nested_labeled_graphs_names_children_and_parity(parity) -> None:
    scan_net, read_net, cls = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)
    scan = FlowBuilder(scan_net).tag("hidden").label("scan").build()
    read = FlowBuilder(read_net).tag("confidence").label("read").build()
    encoder = FlowBuilder(scan).through(read).label("encoder").build()
    model = FlowBuilder(encoder).through(cls).build()
    params = [p for m in (scan_net, read_net, cls) for p in m.parameters()]
    parity(model, lambda x: cls(read_net(scan_net(x))), params, torch.randn(3, 4))
    assert list(dict(model.named_parameters()))[:2] == [
        "encoder.scan.hidden.weight", "encoder.scan.hidden.bias"]  # fmt: skip
    assert set(model.children) == {"encoder"} and set(encoder.children) == {"scan", "read"}
    assert model.children["encoder"] is encoder and encoder.is_composed
    assert scan.is_composed and not model.is_composed
    assert model.nodes[0].kind == "graph" and model.nodes[0].name == "encoder"


def test_hf_style_numeric_layer_names() -> None:
    def layer():
        attn = nn.Module()
        attn.add_module("self", nn.Linear(4, 4))
        return FlowBuilder(attn.get_submodule("self")).tag("self").label("attention").build()

    b = FlowBuilder(FlowBuilder(layer()).label("l0").build()).tag("0")
    for i in range(1, 12):
        b = b.through(FlowBuilder(layer()).label(f"l{i}").build()).tag(str(i))
    layers = b.label("layer").build()
    encoder = FlowBuilder(layers).label("encoder").build()
    bert = FlowBuilder(FlowBuilder(encoder).label("bert").build()).build()
    assert "bert.encoder.layer.11.attention.self.weight" in bert.state_dict()


def test_nested_graph_with_inputs_via_using(parity) -> None:
    cell = StateAdd()
    inner = FlowBuilder(cell).input(["ctx"]).label("inner").build()
    inner_refs = FlowBuilder().input(["ctx"]).through(inner).using(["ctx"]).build()
    x, c = torch.randn(2, 3), torch.randn(2, 3)
    assert inner_refs(x, c).equal(x)  # StateAdd without refs is identity: inner takes ctx only
    with pytest.raises(BuildError, match=r"takes inputs \['ctx'\] but receives refs \[\]"):
        FlowBuilder(FlowBuilder(nn.Identity()).input(["ctx"]).build()).build()
    with pytest.raises(ConfigError, match="lack its inputs"):
        inner.forward_named(x, {})


def test_child_label_errors() -> None:
    a = FlowBuilder(nn.Linear(2, 2)).label("a").build()
    b1 = FlowBuilder(nn.Linear(2, 2)).label("b").build()
    b2 = FlowBuilder(nn.Linear(2, 2)).label("b").build()
    c = FlowBuilder(nn.Linear(2, 2)).label("c").build()
    with pytest.raises(BuildError) as info:
        (FlowBuilder(a).through(b1).tag("x").through(b2).tag("y").through(nn.Identity())
         .tag("c").through(c).build())  # fmt: skip
    errs = info.value.errors
    assert any("duplicate child label 'b'" in e for e in errs)
    assert any("child label 'c' collides with the tag on identity_4" in e for e in errs)
    assert any("submodule name 'c' is already used by identity_4" in e for e in errs)


# -- hash and profiling -----------------------------------------------------------------------


def test_structural_hash_is_structure_only() -> None:
    def make(width: int, label: str | None = None) -> Graph:
        torch.manual_seed(width)
        fb = FlowBuilder(nn.Linear(2, width)).tag("h").through(nn.Linear(width, 1))
        return (fb.label(label) if label else fb).build()

    h = make(4).structural_hash()
    assert len(h) == 64 and h == h.lower() and make(4).short_hash() == h[:8]
    assert make(4, "relabeled").structural_hash() == h  # labels and values are not hashed
    assert make(4).to(torch.float64).structural_hash() == h  # nor dtypes
    assert make(5).structural_hash() != h  # shapes are
    untagged = FlowBuilder(nn.Linear(2, 4)).through(nn.Linear(4, 1)).build()
    assert untagged.structural_hash() != h  # tags are


def test_structural_hash_sees_parameter_free_modules() -> None:
    """ReLU -> GELU changes the architecture although no parameter changes: a checkpoint of
    the one must not load silently into the other."""

    def on_stream(act: nn.Module) -> Graph:
        return FlowBuilder(nn.Linear(2, 4)).through(act).through(nn.Linear(4, 1)).build()

    def inside(act: nn.Module) -> Graph:
        return FlowBuilder(nn.Sequential(nn.Linear(2, 4), act)).through(nn.Linear(4, 1)).build()

    def merged(op: str) -> Graph:
        return FlowBuilder(nn.Linear(2, 4)).split([nn.ReLU(), nn.Tanh()]).merge(op).build()

    assert on_stream(nn.ReLU()).structural_hash() != on_stream(nn.GELU()).structural_hash()
    assert inside(nn.ReLU()).structural_hash() != inside(nn.GELU()).structural_hash()
    assert inside(nn.ReLU()).structural_hash() == inside(nn.ReLU()).structural_hash()
    assert merged("add").structural_hash() != merged("mean").structural_hash()


def test_profiling_records_node_and_level_times() -> None:
    g = FlowBuilder(nn.Linear(2, 4)).split([nn.Linear(4, 4), nn.ReLU()]).merge("add").build()
    fast = g.code
    x = torch.randn(3, 2)
    expected = g(x)
    g._set_profiling(True)
    assert "_ns()" in g.code
    assert g(x).equal(expected)
    assert set(g._node_times) == {"linear_1", "linear_2", "relu_3", "merge_4"}
    assert len(g._level_times) == len(g.levels) and all(t >= 0 for t in g._level_times)
    g._set_profiling(False)
    assert g.code == fast
    g._node_times.clear()
    g(x)
    assert g._node_times == {}
