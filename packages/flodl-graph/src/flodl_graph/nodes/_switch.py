"""The switch node: hard routing, only the selected branch runs."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from .._spec import NodeKind
from ._protocol import CompositeNode, EmitContext


class Switch(CompositeNode):
    """``branches[router(x)](x)``: the router returns one index for the whole batch.

    The index is read to the host (``int``), so no gradient reaches the router through it; an
    index out of range raises :class:`~flodl_core.ConfigError`. Refs reach the router.
    """

    kind = NodeKind.SWITCH
    refs_role = "router"

    def __init__(self, router: nn.Module, branches: Sequence[nn.Module], node: str = "switch"):
        super().__init__()
        self.router = router
        self.branches = nn.ModuleList(branches)
        self.node = node

    def refs_target(self) -> nn.Module:
        return self.router

    def emit(self, ctx: EmitContext, out: str, args: Sequence[str]) -> list[str]:
        x, s, n = args[0], ctx.tmp("s"), len(self.branches)
        router = f"{s}[{'router'!r}]"
        lines = [
            f"{s} = {ctx.module}._modules",
            f"{s}b = {s}[{'branches'!r}]._modules",
            f"{s}i = _switch({ctx.call(router, x)}, {n}, {ctx.node!r})",
        ]
        for i in range(n):
            # _switch checked 0 <= index < n, so the last branch needs no test.
            head = "if" if i == 0 else "elif" if i < n - 1 else "else"
            test = f" {s}i == {i}" if head != "else" else ""
            lines += [f"{head}{test}:", f"    {out} = {s}b[{str(i)!r}]({x})"]
        return lines
