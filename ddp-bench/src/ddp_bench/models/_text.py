"""The Shakespeare models: char-rnn (2-layer LSTM) and gpt-nano (4 pre-norm transformer blocks).

Both map character ids ``(B, T)`` (``T <= SEQ_LEN``) to next-character logits ``(B, T, vocab)``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

SEQ_LEN = 128
VOCAB = 65  # tiny-shakespeare's alphabet; the bench passes the dataset's own size


class CharRnn(nn.Module):
    """Embedding(V, 128) -> LSTM(128, 256, 2 layers) -> Dropout(0.2) -> Linear(256, V)."""

    def __init__(self, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 128)
        self.lstm = nn.LSTM(128, 256, num_layers=2, batch_first=True)
        self.drop = nn.Dropout(0.2)
        self.out = nn.Linear(256, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        """ids: (B, T) int64 -> logits (B, T, V)."""
        h, _ = self.lstm(self.embed(ids))
        return self.out(self.drop(h))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(LN(x)), then x + FFN(LN(x)); causal attention."""

    def __init__(self, d: int = 128, heads: int = 4, ffn: int = 512, dropout: float = 0.1) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, ffn), nn.GELU(), nn.Linear(ffn, d))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x: (B, T, d); mask: (T, T) bool, True above the diagonal (future positions)."""
        h = self.ln1(x)
        x = x + self.drop(self.attn(h, h, h, attn_mask=mask, need_weights=False)[0])
        return x + self.drop(self.ffn(self.ln2(x)))


class GptNano(nn.Module):
    """Token + learned position embeddings, 4 blocks (d 128, 4 heads, FFN 512), LN, Linear(d, V)."""

    def __init__(self, vocab: int = VOCAB, seq_len: int = SEQ_LEN, layers: int = 4) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.tok = nn.Embedding(vocab, 128)
        self.pos = nn.Embedding(seq_len, 128)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList(Block() for _ in range(layers))
        self.ln = nn.LayerNorm(128)
        self.out = nn.Linear(128, vocab)

    def forward(self, ids: Tensor) -> Tensor:
        """ids: (B, T) int64, T <= seq_len -> logits (B, T, V)."""
        t = ids.shape[1]
        if t > self.seq_len:
            raise ValueError(f"gpt-nano: sequence of {t} tokens exceeds seq_len {self.seq_len}")
        pos = torch.arange(t, device=ids.device)
        x = self.drop(self.tok(ids) + self.pos(pos))
        # The causal (upper-triangular) mask: position i attends to positions <= i only.
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool, device=ids.device), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        return self.out(self.ln(x))


def char_rnn(vocab: int = VOCAB) -> nn.Module:
    return CharRnn(vocab)


def gpt_nano(vocab: int = VOCAB) -> nn.Module:
    return GptNano(vocab)
