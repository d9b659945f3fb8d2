"""DistilBERT: its transformer block, under DistilBERT's own attribute names, and the family.

Embeddings are :class:`~flodl_hf.models._bert.BertEmbeddings` with no token-type table
(DistilBERT's config normalises to ``type_vocab_size=0``). Its ``config.json`` names differ
(``dim``, ``n_layers`` ...): ``key_renames`` maps them, and export writes them back.
"""

from __future__ import annotations

from torch import Tensor, nn

from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig
from ._bert import BertEmbeddings
from ._family import Family, backbone_graph, layer_encoder, linear_head
from ._heads import FirstToken
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


def _backbone(config: HfConfig, task: str) -> tuple[Graph, nn.Embedding]:
    emb = BertEmbeddings(config)
    encoder = layer_encoder(config, "transformer", TransformerBlock)
    steps = [(encoder, ["attention_mask"], None)]
    return backbone_graph("distilbert", emb, ["position_ids", "token_type_ids"], steps), (
        emb.word_embeddings
    )


def _seqcls(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
    h = config.hidden_size
    fb.through(FirstToken()).through(nn.Linear(h, h)).tag("pre_classifier")
    fb.through(nn.ReLU()).through(nn.Dropout(config.seq_classif_dropout))
    fb.through(nn.Linear(h, config.num_labels)).tag("classifier")
    return []


def _mlm(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
    h = config.hidden_size
    projector = nn.Linear(h, config.vocab_size)
    fb.through(nn.Linear(h, h)).tag("vocab_transform")
    fb.through(Activation(config.hidden_act))
    fb.through(nn.LayerNorm(h, eps=config.layer_norm_eps)).tag("vocab_layer_norm")
    fb.through(projector).tag("vocab_projector")
    return [projector]


DISTILBERT = Family(
    "distilbert",
    prefix="distilbert",
    arch="DistilBert",
    roots=("embeddings", "transformer"),
    config_defaults={
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 6,
        "type_vocab_size": 0,
        "pad_token_id": 0,
    },
    key_renames={
        "dim": "hidden_size",
        "n_layers": "num_hidden_layers",
        "n_heads": "num_attention_heads",
        "hidden_dim": "intermediate_size",
        "activation": "hidden_act",
        "dropout": "hidden_dropout_prob",
        "attention_dropout": "attention_probs_dropout_prob",
    },
    fixed={"layer_norm_eps": 1e-12},  # hard-coded in DistilBERT's modules
    unwritten=frozenset({"layer_norm_eps", "type_vocab_size"}),
    backbone=_backbone,
    heads={
        "seqcls": _seqcls,
        "tokcls": linear_head("classifier", lambda c: c.hidden_dropout_prob, "labels"),
        "qa": linear_head("qa_outputs", lambda c: c.qa_dropout, "span"),
        "mlm": _mlm,
    },
    ignore_keys=lambda c: (r"^vocab_projector\.weight$",) if c.tie_word_embeddings else (),
)
