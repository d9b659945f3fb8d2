"""iterative_refine: Linear(256,256)->GELU->LN, loop_body(also(Linear->GELU->LN)).for_n(8),
Linear(256,256); batch 64.

(The original: width 1024, batch 256.)
"""

from __future__ import annotations

from torch import nn

from flodl_graph import FlowBuilder

from ._common import Bench, block, randn, spec_of

D, STEPS, B = 256, 8, 64


def flodl() -> nn.Module:
    inp = block(D)
    body = FlowBuilder().also(block(D)).build()
    return FlowBuilder(inp).loop_body(body).for_n(STEPS).through(nn.Linear(D, D)).build()


class Hand(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = block(D)
        self.body = block(D)
        self.out = nn.Linear(D, D)

    def forward(self, x):
        h = self.inp(x)
        for _ in range(STEPS):
            h = h + self.body(h)
        return self.out(h)


BENCH = Bench(
    "iterative_refine", spec_of(__doc__), flodl, Hand,
    lambda b: (randn(b, D), randn(b, D, seed=2)), B,
)  # fmt: skip
