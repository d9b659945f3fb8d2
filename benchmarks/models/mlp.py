"""mlp: Linear(256,512)->GELU->LN, 3 x [Linear(512,512)->GELU->LN], Linear(512,256); batch 64.

(The original: 1024/2048 wide, batch 256; scaled down for a 2-core CPU.)
"""

from __future__ import annotations

from torch import nn

from flodl_graph import FlowBuilder

from ._common import Bench, randn, spec_of

D_IN, D, B = 256, 512, 64


def _layers() -> list[nn.Module]:
    layers: list[nn.Module] = [nn.Linear(D_IN, D), nn.GELU(), nn.LayerNorm(D)]
    for _ in range(3):
        layers += [nn.Linear(D, D), nn.GELU(), nn.LayerNorm(D)]
    return [*layers, nn.Linear(D, D_IN)]


def flodl() -> nn.Module:
    first, *rest = _layers()
    fb = FlowBuilder(first)
    for m in rest:
        fb = fb.through(m)
    return fb.build()


class Hand(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(*_layers())

    def forward(self, x):
        return self.net(x)


BENCH = Bench(
    "mlp", spec_of(__doc__), flodl, Hand,
    lambda b: (randn(b, D_IN), randn(b, D_IN, seed=2)), B,
)  # fmt: skip
