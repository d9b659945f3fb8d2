"""Gate: soft routing equals the stacked, weighted sum of the experts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_core import BuildError, ConfigError, ShapeError
from flodl_graph import FlowBuilder, SigmoidRouter, SoftmaxRouter
from flodl_graph.nodes import Gate


@pytest.mark.parametrize("router_cls", [SoftmaxRouter, SigmoidRouter])
def test_gate_weights_every_expert(parity, router_cls) -> None:
    router = router_cls(6, 3)
    experts = [nn.Sequential(nn.Linear(6, 5), nn.GELU()) for _ in range(3)]
    g = FlowBuilder().gate(router, experts).build()

    def hand(x):
        w = router(x)
        return sum(w[:, i : i + 1] * e(x) for i, e in enumerate(experts))

    params = [p for m in (router, *experts) for p in m.parameters()]
    parity(g, hand, params, torch.randn(4, 6))
    assert g.nodes[1].kind == "gate"
    assert "gate_2.experts.2.0.weight" in dict(g.named_parameters())


def test_gate_router_takes_refs(parity) -> None:
    router, experts = SoftmaxRouter(4, 2), [nn.Linear(4, 4), nn.Linear(4, 4)]
    g = FlowBuilder().input(["ctx"]).gate(router, experts).using(["ctx"]).build()

    def hand(x, ctx):
        w = router(x + ctx)
        return w[:, :1] * experts[0](x) + w[:, 1:] * experts[1](x)

    params = [p for m in (router, *experts) for p in m.parameters()]
    parity(g, hand, params, torch.randn(3, 4), torch.randn(3, 4))


def test_gate_module_forward_agrees_with_graph() -> None:
    g = FlowBuilder().gate(SoftmaxRouter(4, 2), [nn.Linear(4, 4), nn.Linear(4, 4)]).build()
    x = torch.randn(2, 4)
    gate = g.nodes[1].module
    assert isinstance(gate, Gate)
    torch.testing.assert_close(gate(x), g(x))


def test_gate_errors() -> None:
    with pytest.raises(BuildError) as info:
        (FlowBuilder().gate(SoftmaxRouter(4, 2), [nn.Linear(4, 4)])
         .gate(nn.Linear(4, 2), [nn.Linear(4, 4), nn.Linear(4, 4)]).using(["c"])
         .build())  # fmt: skip
    errs = info.value.errors
    assert "at least 2 experts" in errs[0]
    assert "the router Linear of gate_2 does not support .using() refs" in errs[1]
    assert "SoftmaxRouter" in errs[1]


class _NoWeights(nn.Module):
    def forward(self, x: torch.Tensor) -> None:
        return None


@pytest.mark.parametrize(
    ("router", "error", "needle"),
    [
        # (B, 1) used to broadcast silently: both experts weighted by the same number.
        (nn.Sequential(nn.Linear(4, 1), nn.Sigmoid()), ShapeError, r"shape \(2, 1\); expected"),
        (SoftmaxRouter(4, 3), ShapeError, r"shape \(2, 3\); expected weights \(\.\.\., 2\)"),
        (_NoWeights(), ConfigError, "NoneType; expected a tensor"),
    ],
)
def test_gate_router_must_give_one_weight_per_expert(router, error, needle) -> None:
    g = FlowBuilder().gate(router, [nn.Linear(4, 4), nn.Linear(4, 4)]).build()
    with pytest.raises(error, match=f"gate_2: the router returned {needle}"):
        g(torch.randn(2, 4))
