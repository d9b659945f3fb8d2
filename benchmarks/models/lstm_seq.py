"""lstm_seq: fused 2-layer LSTM(64,128) over 25 steps, Linear(128,64) on the last step; batch 32.

(The original: LSTM(256,512), 50 steps, batch 128.)
"""

from __future__ import annotations

from torch import nn

from ._common import rnn_bench

F_IN, H, T, B = 64, 128, 25, 32

BENCH = rnn_bench(
    "lstm_seq",
    __doc__,
    lambda: nn.LSTM(F_IN, H, num_layers=2, batch_first=True),
    hidden=H,
    features=F_IN,
    steps=T,
    batch=B,
)
