"""ALBERT: factorised embeddings (``embedding_size`` < ``hidden_size``) and shared layer groups.

The encoder runs ``num_hidden_layers`` steps over only ``num_hidden_groups`` distinct groups of
weights (ALBERT-base: 12 steps, 1 group), so it is one module holding the groups and looping over
them, under transformers' names (``encoder.albert_layer_groups.0.albert_layers.0...``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from flodl_core import ConfigError
from flodl_graph import Graph

from .._config import HfConfig
from ._bert import BertEmbeddings, BertSelfAttention
from ._family import QA_HEAD, Family, backbone_graph, linear_head, module_head
from ._heads import AlbertMLMHead, decoders
from ._layers import Activation


class AlbertAttention(BertSelfAttention):
    """BERT's self-attention with its output projection and post-LayerNorm in one module."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__(config)
        h = config.hidden_size
        self.dense = nn.Linear(h, h)
        self.LayerNorm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.output_dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        ctx = super().forward(x, mask)
        return self.LayerNorm(x + self.output_dropout(self.dense(ctx)))


class AlbertLayer(nn.Module):
    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.attention = AlbertAttention(config)
        self.ffn = nn.Linear(h, config.intermediate_size)
        self.ffn_output = nn.Linear(config.intermediate_size, h)
        self.activation = Activation(config.hidden_act)
        self.full_layer_layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        a = self.attention(x, mask)
        return self.full_layer_layer_norm(self.ffn_output(self.activation(self.ffn(a))) + a)


class AlbertLayerGroup(nn.Module):
    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.albert_layers = nn.ModuleList(
            AlbertLayer(config) for _ in range(config.inner_group_num)
        )

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        for layer in self.albert_layers:
            x = layer(x, mask)
        return x


class AlbertTransformer(nn.Module):
    """``(B, S, E) -> (B, S, H)``: project the embeddings, then run the shared groups.

    Step ``i`` of ``num_hidden_layers`` uses group ``i * groups // layers``.
    """

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.num_layers = config.num_hidden_layers
        self.num_groups = config.num_hidden_groups
        self.embedding_hidden_mapping_in = nn.Linear(config.embedding_dim, config.hidden_size)
        self.albert_layer_groups = nn.ModuleList(
            AlbertLayerGroup(config) for _ in range(config.num_hidden_groups)
        )

    def forward(self, x: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        x = self.embedding_hidden_mapping_in(x)
        for i in range(self.num_layers):
            x = self.albert_layer_groups[i * self.num_groups // self.num_layers](x, attention_mask)
        return x

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(x, refs.get("attention_mask"))


class AlbertPooler(nn.Linear):
    """``tanh(W x[:, 0] + b)``; a Linear subclass so its keys are ``pooler.weight`` / ``.bias``."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(super().forward(x[:, 0]))


def _backbone(config: HfConfig, task: str) -> tuple[Graph, nn.Embedding]:
    emb = BertEmbeddings(config)
    pooler = AlbertPooler(config) if task in ("base", "seqcls") else None
    steps = [(AlbertTransformer(config), ["attention_mask"], "encoder")]
    graph = backbone_graph(
        "albert", emb, ["position_ids", "token_type_ids"], steps, pooler, task == "seqcls"
    )
    return graph, emb.word_embeddings


def _head_dropout(config: HfConfig) -> float:
    return float(config.raw.get("classifier_dropout_prob", 0.1))


def _check(config: HfConfig) -> None:
    if config.num_hidden_layers % config.num_hidden_groups:
        raise ConfigError(
            f"config num_hidden_layers {config.num_hidden_layers} must be a multiple of "
            f"num_hidden_groups {config.num_hidden_groups}"
        )


ALBERT = Family(
    "albert",
    prefix="albert",
    arch="Albert",
    roots=("embeddings", "encoder", "pooler"),
    config_defaults={
        "vocab_size": 30000,
        "embedding_size": 128,
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "intermediate_size": 16384,
        "hidden_act": "gelu_new",
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "pad_token_id": 0,
    },
    backbone=_backbone,
    heads={
        "seqcls": linear_head("classifier", _head_dropout, "labels"),
        "tokcls": linear_head("classifier", _head_dropout, "labels"),
        "qa": QA_HEAD,
        "mlm": module_head("predictions", AlbertMLMHead, decoders),
    },
    head_dropout=_head_dropout,
    check=_check,
    ignore_keys=lambda c: (r"(^|\.)decoder\.(weight|bias)$",) if c.tie_word_embeddings else (),
)
