"""residual_tower: Linear(256,256), 12 x also(Linear->GELU->LN), Linear(256,256); batch 64.

(The original: width 1024, batch 256.)
"""

from __future__ import annotations

from torch import nn

from flodl_graph import FlowBuilder

from ._common import Bench, block, pair_data, spec_of

D, DEPTH, B = 256, 12, 64


def flodl() -> nn.Module:
    fb = FlowBuilder(nn.Linear(D, D))
    for _ in range(DEPTH):
        fb = fb.also(block(D))
    return fb.through(nn.Linear(D, D)).build()


class Hand(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(D, D)
        self.blocks = nn.ModuleList(block(D) for _ in range(DEPTH))
        self.out = nn.Linear(D, D)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = h + b(h)
        return self.out(h)


BENCH = Bench("residual_tower", spec_of(__doc__), flodl, Hand, pair_data(D), B)
