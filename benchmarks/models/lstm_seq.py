"""lstm_seq: fused 2-layer LSTM(64,128) over 25 steps, Linear(128,64) on the last step; batch 32.

(The original: LSTM(256,512), 50 steps, batch 128.)
"""

from __future__ import annotations

from torch import nn

from flodl_graph import FlowBuilder

from ._common import Bench, LastStep, randn, spec_of

F_IN, H, T, B = 64, 128, 25, 32


def flodl() -> nn.Module:
    return (FlowBuilder(nn.LSTM(F_IN, H, num_layers=2, batch_first=True)).through(LastStep())
            .through(nn.Linear(H, F_IN)).build())  # fmt: skip


class Hand(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(F_IN, H, num_layers=2, batch_first=True)
        self.head = nn.Linear(H, F_IN)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


BENCH = Bench(
    "lstm_seq", spec_of(__doc__), flodl, Hand,
    lambda b: (randn(b, T, F_IN), randn(b, F_IN, seed=2)), B,
)  # fmt: skip
