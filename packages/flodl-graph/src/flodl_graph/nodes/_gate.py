"""The gate node: soft routing over experts (mixture of experts without sparsity)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .._spec import NodeKind
from ._protocol import CompositeNode, EmitContext


class Gate(CompositeNode):
    """``sum_n router(x)[..., n] * experts[n](x)``: every expert runs on the input.

    x: (B, D_in) -> experts (B, D) each, stacked (B, D, N); router (B, N) -> out (B, D).
    The router's weights are used as given (no renormalisation). Refs reach the router.
    """

    kind = NodeKind.GATE
    refs_role = "router"

    def __init__(self, router: nn.Module, experts: Sequence[nn.Module], node: str = "gate") -> None:
        super().__init__()
        self.router = router
        self.experts = nn.ModuleList(experts)
        self.node = node

    def refs_target(self) -> nn.Module:
        return self.router

    def emit(self, ctx: EmitContext, out: str, args: Sequence[str]) -> list[str]:
        x, g = args[0], ctx.tmp("g")
        experts = ", ".join(f"{g}e[{str(i)!r}]({x})" for i in range(len(self.experts)))
        if len(self.experts) == 1:
            experts += ","  # a one-element tuple
        router = f"{g}[{'router'!r}]"
        return [
            f"{g} = {ctx.module}._modules",
            f"{g}e = {g}[{'experts'!r}]._modules",
            f"{g}w = _gate({ctx.call(router, x)}, {len(self.experts)}, {ctx.node!r})",
            # experts (..., D, N) * weights (..., 1, N), summed over N: no renormalisation.
            f"{out} = (torch.stack(({experts}), -1) * {g}w.unsqueeze(-2)).sum(-1)",
            f"del {g}w",
        ]
