"""The gate node: soft routing over experts (mixture of experts without sparsity)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor, nn

from ._runtime import call_refs, gate_combine


class Gate(nn.Module):
    """``sum_n router(x)[..., n] * experts[n](x)``: every expert runs on the input.

    x: (B, D_in) -> experts (B, D) each, stacked (B, D, N); router (B, N) -> out (B, D).
    The router's weights are used as given (no renormalisation). Refs reach the router.
    """

    def __init__(self, router: nn.Module, experts: Sequence[nn.Module]) -> None:
        super().__init__()
        self.router = router
        self.experts = nn.ModuleList(experts)

    def forward(self, x: Tensor, refs: Mapping[str, Tensor] | None = None) -> Tensor:
        weights = call_refs(self.router, x, refs)
        return gate_combine(torch.stack([e(x) for e in self.experts], -1), weights)

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        return self.forward(x, refs)
