"""DistilBERT's transformer block, under DistilBERT's own attribute names.

Embeddings are :class:`~flodl_hf.models._bert.BertEmbeddings` with no token-type table
(DistilBERT's config normalises to ``type_vocab_size=0``).
"""

from __future__ import annotations

from torch import Tensor, nn

from .._config import HfConfig
from ._layers import Activation, attend


class MultiHeadSelfAttention(nn.Module):
    """``q_lin`` / ``k_lin`` / ``v_lin`` / ``out_lin`` attention: ``(B, S, H) -> (B, S, H)``."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.q_lin = nn.Linear(h, h)
        self.k_lin = nn.Linear(h, h)
        self.v_lin = nn.Linear(h, h)
        self.out_lin = nn.Linear(h, h)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        drop = self.dropout_p if self.training else 0.0
        ctx = attend(self.q_lin(x), self.k_lin(x), self.v_lin(x), self.num_heads, mask, drop)
        return self.out_lin(ctx)


class FFN(nn.Module):
    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.lin1 = nn.Linear(config.hidden_size, config.intermediate_size)
        self.lin2 = nn.Linear(config.intermediate_size, config.hidden_size)
        self.activation = Activation(config.hidden_act)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.lin2(self.activation(self.lin1(x))))


class TransformerBlock(nn.Module):
    """Post-LN block: ``(B, S, H) -> (B, S, H)``; mask through ``.using(["attention_mask"])``."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.attention = MultiHeadSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.ffn = FFN(config)
        self.output_layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, x: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        a = self.sa_layer_norm(self.attention(x, attention_mask) + x)
        return self.output_layer_norm(self.ffn(a) + a)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(x, refs.get("attention_mask"))
