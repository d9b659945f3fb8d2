"""The map node: a body applied per row (``each``/``over``) or per slice of the last dim."""

from __future__ import annotations

from typing import Literal

from torch import Tensor, nn

from ._runtime import map_each, map_slices

MapMode = Literal["each", "over", "slices"]


class Map(nn.Module):
    """Applies ``body`` element-wise along dim 0, or over ``n`` slices of the last dim.

    - ``each`` / ``over``: x (N, ...) -> cat([body(x[i:i+1]) for i]) (empty input passes
      through); ``over`` reads a tagged tensor instead of the stream.
    - ``slices``: x (B, D) -> rows (B·n, D/n) -> body -> (B, out·n).
    - ``batched``: the body is called once on all rows instead of once per row.
    """

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

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "slices":
            return map_slices(self.body, x, self.n, self.batched, self.node)
        if self.batched:
            return self.body(x)
        return map_each(self.body, x)

    def extra_repr(self) -> str:
        extra = f"({self.n})" if self.mode == "slices" else "()"
        return f"{'batched().' if self.batched else ''}{self.mode}{extra}"
