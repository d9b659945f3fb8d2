"""convnet: 5 x [Conv3x3 (3->16->32->64->64->64), BN, ReLU], MaxPool2 after the first 4, avg pool,
Linear(64,10); batch 16 of 3x32x32.

(The original: 64..512 channels, 64x64 images, batch 128.)
"""

from __future__ import annotations

from torch import nn

from ._common import chain_bench, pair_data

CH, B, HW, OUT = [3, 16, 32, 64, 64, 64], 16, 32, 10


def _layers() -> list[nn.Module]:
    layers: list[nn.Module] = []
    for i in range(5):
        layers += [nn.Conv2d(CH[i], CH[i + 1], 3, padding=1), nn.BatchNorm2d(CH[i + 1]), nn.ReLU()]
        if i < 4:
            layers.append(nn.MaxPool2d(2))
    return [*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(CH[-1], OUT)]


BENCH = chain_bench("convnet", __doc__, _layers, pair_data(3, HW, HW, target=(OUT,)), B)
