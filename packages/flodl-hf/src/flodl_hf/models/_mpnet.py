"""MPNet (Song et al. 2020, "MPNet: Masked and Permuted Pre-training"): BERT-style post-LN blocks
whose attention adds a learned bias per head and *relative position bucket* (T5's log-spaced
buckets, Raffel et al. 2020, sec. 2.1), fairseq positions from padding id 1, no token types.

The bias table lives once in the encoder (``encoder.relative_attention_bias``); the encoder
computes ``bias + padding mask`` once per call as a side branch and every layer reads it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig
from ._bert import BertEmbeddings, BertIntermediate, BertPooler, BertSelfOutput
from ._family import QA_HEAD, TOKEN_HEAD, Family, backbone_graph, module_head, stack
from ._heads import RobertaClassificationHead, RobertaLMHead, decoders
from ._layers import merge_heads, split_heads

# transformers computes the buckets with these constants whatever relative_attention_num_buckets
# says (the table may be larger; rows past 32 are then never read).
_BUCKETS = 32
_MAX_DISTANCE = 128


def relative_position_bucket(
    relative_position: Tensor, num_buckets: int = _BUCKETS, max_distance: int = _MAX_DISTANCE
) -> Tensor:
    """Bucket of each key-minus-query distance: half the buckets per direction, exact up to
    ``num_buckets // 4``, log-spaced up to ``max_distance``, clamped beyond."""
    n = -relative_position
    half = num_buckets // 2
    ret = (n < 0).to(torch.long) * half
    n = torch.abs(n)
    max_exact = half // 2
    is_small = n < max_exact
    large = max_exact + (
        torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (half - max_exact)
    ).to(torch.long)
    large = torch.min(large, torch.full_like(large, half - 1))
    return ret + torch.where(is_small, n, large)


class RelativeAttentionBias(nn.Embedding):
    """Graph node holding ``encoder.relative_attention_bias.weight`` (``(buckets, heads)``).

    From the stream ``x: (B, S, H)`` and the additive ``attention_mask`` ref ``(B, 1, 1, S)`` it
    returns the whole attention bias ``(B, heads, S, S)`` the layers add to their scores.
    """

    def __init__(self, config: HfConfig) -> None:
        super().__init__(config.relative_attention_num_buckets, config.num_attention_heads)

    def position_bias(self, seq_len: int, device: torch.device) -> Tensor:
        """``(1, heads, S, S)``."""
        pos = torch.arange(seq_len, dtype=torch.long, device=device)
        bucket = relative_position_bucket(pos[None, :] - pos[:, None])
        return super().forward(bucket).permute(2, 0, 1).unsqueeze(0)

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        return self.position_bias(x.shape[1], x.device).expand(x.shape[0], -1, -1, -1)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        bias = self.position_bias(x.shape[1], x.device)
        mask = refs.get("attention_mask")
        if mask is None:
            return bias.expand(x.shape[0], -1, -1, -1)
        return bias.to(mask.dtype) + mask


class MPNetSelfAttention(nn.Module):
    """``q`` / ``k`` / ``v`` / ``o`` projections; SDPA with the precomputed bias as its mask."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.q = nn.Linear(h, h)
        self.k = nn.Linear(h, h)
        self.v = nn.Linear(h, h)
        self.o = nn.Linear(h, h)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """``x: (B, S, H)``, ``bias: (B, heads, S, S)`` -> ``(B, S, H)``."""
        q, k, v = (split_heads(f(x), self.num_heads) for f in (self.q, self.k, self.v))
        drop = self.dropout_p if self.training else 0.0
        ctx = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=bias, dropout_p=drop
        )
        return self.o(merge_heads(ctx))


class MPNetAttention(nn.Module):
    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.attn = MPNetSelfAttention(config)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, bias: Tensor | None) -> Tensor:
        return self.LayerNorm(self.dropout(self.attn(x, bias)) + x)


class MPNetLayer(nn.Module):
    """One post-LN block ``(B, S, H) -> (B, S, H)``; reads the ``relative_attention_bias`` ref."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.attention = MPNetAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertSelfOutput(config, in_features=config.intermediate_size)

    def forward(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        a = self.attention(x, bias)
        return self.output(self.intermediate(a), a)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(x, refs.get("relative_attention_bias"))


def _encoder(config: HfConfig) -> Graph:
    fb = FlowBuilder().input(["attention_mask"])
    fb.fork(RelativeAttentionBias(config)).using(["attention_mask"]).tag("relative_attention_bias")
    refs = ["relative_attention_bias"]
    layers = [MPNetLayer(config) for _ in range(config.num_hidden_layers)]
    fb.through(stack("layer", layers, refs)).using(refs)
    return fb.label("encoder").build()


def _backbone(config: HfConfig, task: str) -> tuple[Graph, nn.Embedding]:
    emb = BertEmbeddings(config, "padding_offset", padding_idx=1)
    pooler = BertPooler(config) if task == "base" else None
    steps = [(_encoder(config), ["attention_mask"], None)]
    graph = backbone_graph("mpnet", emb, ["position_ids", "token_type_ids"], steps, pooler)
    return graph, emb.word_embeddings


MPNET = Family(
    "mpnet",
    prefix="mpnet",
    arch="MPNet",
    roots=("embeddings", "encoder", "pooler"),
    config_defaults={
        "vocab_size": 30527,
        "max_position_embeddings": 512,
        "type_vocab_size": 0,
        "pad_token_id": 1,
    },
    unwritten=frozenset({"type_vocab_size"}),
    backbone=_backbone,
    heads={
        "seqcls": module_head("classifier", RobertaClassificationHead, None),
        "tokcls": TOKEN_HEAD,
        "qa": QA_HEAD,
        "mlm": module_head("lm_head", RobertaLMHead, decoders),
    },
    positions="padding_offset",
    position_padding=1,
    ignore_keys=lambda c: (r"(^|\.)decoder\.(weight|bias)$",) if c.tie_word_embeddings else (),
)
