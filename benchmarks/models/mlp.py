"""mlp: Linear(256,512)->GELU->LN, 3 x [Linear(512,512)->GELU->LN], Linear(512,256); batch 64.

(The original: 1024/2048 wide, batch 256; scaled down for a 2-core CPU.)
"""

from __future__ import annotations

from torch import nn

from ._common import chain_bench, pair_data

D_IN, D, B = 256, 512, 64


def _layers() -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Linear(D_IN, D), nn.GELU(), nn.LayerNorm(D)]
    for _ in range(3):
        layers += [nn.Linear(D, D), nn.GELU(), nn.LayerNorm(D)]
    return [*layers, nn.Linear(D, D_IN)]


BENCH = chain_bench("mlp", __doc__, _layers, pair_data(D_IN), B)
