"""The generated forward: straight-line, frees values after their last use, compiles."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_graph import FlowBuilder, SoftmaxRouter, StateAdd


def test_chain_is_straight_line_with_early_frees() -> None:
    g = FlowBuilder(nn.Linear(2, 4)).through(nn.ReLU()).through(nn.Linear(4, 1)).build()
    assert g.code == (
        "def forward(self, x):\n"
        "    _m = self._modules\n"
        "    try:\n"
        "        linear_1 = _m['linear_1'](x)\n"
        "        del x\n"
        "        relu_2 = _m['relu_2'](linear_1)\n"
        "        del linear_1\n"
        "        linear_3 = _m['linear_3'](relu_2)\n"
        "        del relu_2\n"
        "        return linear_3\n"
        "    except Exception as _e:\n"
        "        _note(self, _e)\n"
        "        raise\n"
    )


def test_composites_emitted_as_code() -> None:
    g = (FlowBuilder().loop_body(nn.Linear(2, 2)).for_n(3)
         .gate(SoftmaxRouter(2, 2), [nn.Linear(2, 2), nn.Linear(2, 2)]).build())  # fmt: skip
    assert "for _ in range(3):\n            loop_2 = _b_loop_2(loop_2)" in g.code
    assert "torch.stack((_g_gate_3e['0'](loop_2), _g_gate_3e['1'](loop_2)), -1)" in g.code


def test_state_with_dashed_tag_and_tags_stored() -> None:
    g = FlowBuilder(StateAdd()).using(["my-mem"]).tag("my-mem").build()
    assert "_fr0 = _st['my-mem']" in g.code and "_tg['my-mem'] = state_add_1" in g.code
    x = torch.ones(1, 2)
    g(x)
    assert g(x).equal(2 * x)


class Tracked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x)

    def forward_named(self, x, refs):
        return self.lin(x) + refs["mem"]


@pytest.mark.slow
# Inductor's own imports touch torch.jit APIs it deprecates; not ours to fix.
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
# Dynamo reads .grad of the carried (non-leaf) state while building guards.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_torch_compile_fullgraph_matches_eager() -> None:
    """One compiled graph covering chain, residual, for-loop, gate, tags and forward refs."""
    body = FlowBuilder().also(nn.Sequential(nn.Linear(8, 8), nn.GELU())).build()
    g = (FlowBuilder(nn.Linear(4, 8)).tag("h").through(Tracked()).using(["mem"]).tag("mem")
         .loop_body(body).for_n(2)
         .gate(SoftmaxRouter(8, 2), [nn.Linear(8, 8), nn.Linear(8, 8)])
         .through(nn.Linear(8, 2)).build())  # fmt: skip
    compiled = torch.compile(g, fullgraph=True)
    xs = [torch.randn(3, 4) for _ in range(2)]
    eager_out, comp_out = [], []
    for run, outs in ((g, eager_out), (compiled, comp_out)):
        g.reset_state()
        g.zero_grad()
        for x in xs:
            y = run(x)
            outs.append(y.detach())
        y.sum().backward()
        outs.append(g.get_submodule("h").weight.grad.clone())
        outs.append(g.tagged("h").detach())
    for a, b in zip(eager_out, comp_out, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
