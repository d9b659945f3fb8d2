"""transformer: Embedding(512,64) + learned positions (32), 2 post-LN encoder layers (4 heads, FFN
256 GELU), Linear(64,512); batch 16, cross-entropy.

(The original: vocab 8192, width 512, 128 tokens, 4 layers, 8 heads, FFN 2048, batch 32.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flodl_graph import FlowBuilder

from ._common import Bench, spec_of

V, D, T, HEADS, FF, LAYERS, B = 512, 64, 32, 4, 256, 2, 16


class Embed(nn.Module):
    """Token embedding plus learned positions: ids (B, T) -> (B, T, D)."""

    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(1, T, D) * 0.02)

    def forward(self, ids: Tensor) -> Tensor:
        return self.tok(ids) + self.pos


class SelfAttention(nn.Module):
    """Unmasked self-attention: (B, T, D) -> (B, T, D)."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(D, HEADS, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return self.mha(x, x, x, need_weights=False)[0]


def _ffn() -> nn.Sequential:
    return nn.Sequential(nn.Linear(D, FF), nn.GELU(), nn.Linear(FF, D))


def flodl() -> nn.Module:
    fb = FlowBuilder(Embed())
    for _ in range(LAYERS):
        fb = fb.also(SelfAttention()).through(nn.LayerNorm(D)).also(_ffn()).through(nn.LayerNorm(D))
    return fb.through(nn.Linear(D, V)).build()


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(D, HEADS, batch_first=True)
        self.ln1 = nn.LayerNorm(D)
        self.ffn = _ffn()
        self.ln2 = nn.LayerNorm(D)

    def forward(self, x: Tensor) -> Tensor:
        x = self.ln1(x + self.attn(x, x, x, need_weights=False)[0])
        return self.ln2(x + self.ffn(x))


class Hand(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = Embed()
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.head = nn.Linear(D, V)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def _data(b: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, V, (b, T), generator=g), torch.randint(0, V, (b, T), generator=g)


def _loss(logits: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(logits.reshape(-1, V), target.reshape(-1))


BENCH = Bench("transformer", spec_of(__doc__), flodl, Hand, _data, B, _loss)
