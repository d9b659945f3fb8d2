"""gru_seq: fused GRU(64,128) over 25 steps, Linear(128,64) on the last step; batch 32.

(The original: GRU(256,512), 50 steps, batch 128.)
"""

from __future__ import annotations

from torch import nn

from flodl_graph import FlowBuilder

from ._common import Bench, LastStep, randn, spec_of

F_IN, H, T, B = 64, 128, 25, 32


def flodl() -> nn.Module:
    return (FlowBuilder(nn.GRU(F_IN, H, batch_first=True)).through(LastStep())
            .through(nn.Linear(H, F_IN)).build())  # fmt: skip


class Hand(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(F_IN, H, batch_first=True)
        self.head = nn.Linear(H, F_IN)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


BENCH = Bench(
    "gru_seq", spec_of(__doc__), flodl, Hand,
    lambda b: (randn(b, T, F_IN), randn(b, F_IN, seed=2)), B,
)  # fmt: skip
