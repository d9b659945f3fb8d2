"""conv_autoenc: Conv4x4 s2 (3->16->32->64, BN+ReLU), ConvT4x4 s2 (64->32->16, BN+ReLU), ConvT
16->3; batch 16 of 3x32x32.

(The original: 64..512 channels, 64x64 images, batch 64.)
"""

from __future__ import annotations

from torch import nn

from ._common import chain_bench, randn

B, HW = 16, 32


def _layers() -> list[nn.Module]:
    layers: list[nn.Module] = []
    for cin, cout in ((3, 16), (16, 32), (32, 64)):
        layers += [nn.Conv2d(cin, cout, 4, 2, 1), nn.BatchNorm2d(cout), nn.ReLU()]
    for cin, cout in ((64, 32), (32, 16)):
        layers += [nn.ConvTranspose2d(cin, cout, 4, 2, 1), nn.BatchNorm2d(cout), nn.ReLU()]
    return [*layers, nn.ConvTranspose2d(16, 3, 4, 2, 1)]


def _data(b: int):
    x = randn(b, 3, HW, HW)
    return x, x.clone()


BENCH = chain_bench("conv_autoenc", __doc__, _layers, _data, B)
