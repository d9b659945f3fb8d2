"""The switch node: hard routing, only the selected branch runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torch import Tensor, nn

from ._runtime import call_refs, switch_index


class Switch(nn.Module):
    """``branches[router(x)](x)``: the router returns one index for the whole batch.

    The index is read to the host (``int``), so no gradient reaches the router through it; an
    index out of range raises :class:`~flodl_core.ConfigError`. Refs reach the router.
    """

    def __init__(self, router: nn.Module, branches: Sequence[nn.Module], node: str = "switch"):
        super().__init__()
        self.router = router
        self.branches = nn.ModuleList(branches)
        self.node = node

    def forward(self, x: Tensor, refs: Mapping[str, Tensor] | None = None) -> Tensor:
        i = switch_index(call_refs(self.router, x, refs), len(self.branches), self.node)
        return self.branches[i](x)

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        return self.forward(x, refs)
