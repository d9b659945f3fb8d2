"""gated_routing: Linear(128,128)->GELU, gate(SoftmaxRouter(128,8), 8 experts Linear->GELU->LN),
Linear(128,128); batch 64.

(The original: width 512, batch 256.)
"""

from __future__ import annotations

import torch
from torch import nn

from flodl_graph import FlowBuilder, SoftmaxRouter

from ._common import Bench, block, pair_data, spec_of

D, N, B = 128, 8, 64


def flodl() -> nn.Module:
    return (FlowBuilder(nn.Linear(D, D)).through(nn.GELU())
            .gate(SoftmaxRouter(D, N), [block(D) for _ in range(N)])
            .through(nn.Linear(D, D)).build())  # fmt: skip


class Hand(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(D, D)
        self.act = nn.GELU()
        self.router = nn.Linear(D, N)
        self.experts = nn.ModuleList(block(D) for _ in range(N))
        self.out = nn.Linear(D, D)

    def forward(self, x):
        h = self.act(self.inp(x))
        w = self.router(h).softmax(-1)
        e = torch.stack([expert(h) for expert in self.experts], -1)
        return self.out((e * w.unsqueeze(-2)).sum(-1))


BENCH = Bench("gated_routing", spec_of(__doc__), flodl, Hand, pair_data(D), B)
