"""ResNet-20 for CIFAR-10 (He et al. 2016, section 4.2), written by hand and with FlowBuilder.

Both variants take the parts below, created in the same order, so under one seed they start from
identical weights and compute the same function: images ``(B, 3, 32, 32)`` -> logits ``(B, 10)``.
Stages: 3 blocks of 16 channels (32x32), 3 of 32 (16x16, the first strides 2), 3 of 64 (8x8).
"""

from __future__ import annotations

from torch import Tensor, nn

from flodl_graph import FlowBuilder

#: (channels, stride of the stage's first block) for the three stages.
STAGES = ((16, 1), (32, 2), (64, 2))
BLOCKS_PER_STAGE = 3  # ResNet-(6n+2) with n = 3


def stem() -> nn.Sequential:
    """conv3x3(3 -> 16) -> BN -> ReLU."""
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())


def block_main(cin: int, cout: int, stride: int) -> nn.Sequential:
    """The residual branch of a BasicBlock: conv3x3 -> BN -> ReLU -> conv3x3 -> BN."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False),
        nn.BatchNorm2d(cout),
    )


def block_skip(cin: int, cout: int, stride: int) -> nn.Sequential | None:
    """The projection shortcut (1x1 conv + BN) when the shape changes, else ``None`` (identity)."""
    if cin == cout and stride == 1:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))


def head() -> nn.Sequential:
    """Global average pool -> Linear(64, 10): ``(B, 64, 8, 8)`` -> ``(B, 10)``."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def block_shapes() -> list[tuple[int, int, int]]:
    """``(cin, cout, stride)`` of the nine blocks, in order."""
    shapes, cin = [], 16
    for cout, stride in STAGES:
        for i in range(BLOCKS_PER_STAGE):
            shapes.append((cin, cout, stride if i == 0 else 1))
            cin = cout
    return shapes


class BasicBlock(nn.Module):
    """``relu(main(x) + skip(x))``; ``skip`` is the identity when ``None``."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.main = block_main(cin, cout, stride)
        self.skip = block_skip(cin, cout, stride)
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.skip is None else self.skip(x)
        return self.relu(self.main(x) + shortcut)


class ResNet20(nn.Module):
    """The hand-written ResNet-20: stem, nine BasicBlocks, head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = stem()
        self.blocks = nn.Sequential(*(BasicBlock(*s) for s in block_shapes()))
        self.head = head()

    def forward(self, x: Tensor) -> Tensor:
        """x: (B, 3, 32, 32) -> logits (B, 10)."""
        return self.head(self.blocks(self.stem(x)))


def resnet() -> nn.Module:
    """ResNet-20 written by hand."""
    return ResNet20()


def build_graph(
    stem_: nn.Module, blocks: list[tuple[nn.Module, nn.Module | None]], head_: nn.Module
) -> nn.Module:
    """Wire ResNet-20 as a flodl graph from its parts: ``also`` for identity skips,
    ``also_with`` for projections, a ReLU after each block's sum."""
    fb = FlowBuilder(stem_)
    for main, skip in blocks:
        fb = fb.also(main) if skip is None else fb.also_with(skip, main)
        fb = fb.through(nn.ReLU())
    return fb.through(head_).label("resnet20").build()


def resnet_graph() -> nn.Module:
    """ResNet-20 built with FlowBuilder (parts created in the hand-written model's order)."""
    first = stem()
    # main before skip in each block, as BasicBlock creates them
    blocks = [(block_main(*s), block_skip(*s)) for s in block_shapes()]
    return build_graph(first, blocks, head())
