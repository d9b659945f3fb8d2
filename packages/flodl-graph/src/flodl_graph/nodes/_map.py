"""The map node: a body applied per row (``each``/``over``) or per slice of the last dim."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from torch import nn

from .._spec import NodeKind
from ._protocol import CompositeNode, EmitContext

MapMode = Literal["each", "over", "slices"]


class Map(CompositeNode):
    """Applies ``body`` element-wise along dim 0, or over ``n`` slices of the last dim.

    - ``each`` / ``over``: x (N, ...) -> cat([body(x[i:i+1]) for i]) (empty input passes
      through); ``over`` reads a tagged tensor instead of the stream.
    - ``slices``: x (B, D) -> rows (B·n, D/n) -> body -> (B, out·n).
    - ``batched``: the body is called once on all rows instead of once per row.

    Takes no refs.
    """

    kind = NodeKind.MAP

    def __init__(
        self,
        body: nn.Module,
        mode: MapMode,
        batched: bool = False,
        n: int = 1,
        node: str = "map",
    ) -> None:
        super().__init__()
        self.body = body
        self.mode: MapMode = mode
        self.batched = batched
        self.n = n
        self.node = node

    def emit(self, ctx: EmitContext, out: str, args: Sequence[str]) -> list[str]:
        x, body = args[0], ctx.sub("body")
        if self.mode == "slices":
            return [f"{out} = _map_slices({body}, {x}, {self.n}, {self.batched}, {ctx.node!r})"]
        if self.batched:
            return [f"{out} = {body}({x})"]
        return [f"{out} = _map_each({body}, {x}, {ctx.node!r})"]

    def extra_repr(self) -> str:
        extra = f"({self.n})" if self.mode == "slices" else "()"
        return f"{'batched().' if self.batched else ''}{self.mode}{extra}"
