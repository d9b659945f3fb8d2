"""BERT: building blocks (also used by RoBERTa, XLM-RoBERTa, ELECTRA and, embeddings only, ALBERT
and MPNet) and the ``BERT`` family declaration.

Attribute names mirror transformers' (``attention.self.query``, ``output.LayerNorm`` ...) so that
``state_dict()`` keys are HF checkpoint keys with no renaming table.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._config import HfConfig
from ._family import (
    QA_HEAD,
    TOKEN_HEAD,
    Family,
    backbone_graph,
    layer_encoder,
    linear_head,
    module_head,
)
from ._heads import BertOnlyMLMHead, decoders
from ._layers import Activation, attend


def roberta_position_ids(input_ids: Tensor, padding_idx: int) -> Tensor:
    """fairseq positions: tokens count from ``padding_idx + 1``, padding keeps ``padding_idx``.

    ``input_ids: (B, S) -> (B, S)``. This is why RoBERTa checkpoints carry 514 position rows.
    """
    keep = input_ids.ne(padding_idx).int()
    return (torch.cumsum(keep, dim=1).type_as(keep) * keep).long() + padding_idx


class BertEmbeddings(nn.Module):
    """Word + position + token-type embeddings, LayerNorm, dropout.

    ``position_mode`` is ``"arange"`` (BERT, ALBERT, ELECTRA) or ``"padding_offset"`` (RoBERTa,
    XLM-R, MPNet);
    the table width is ``config.embedding_dim`` (ALBERT factorises it below ``hidden_size``).
    """

    def __init__(
        self, config: HfConfig, position_mode: str = "arange", padding_idx: int | None = None
    ) -> None:
        super().__init__()
        dim = config.embedding_dim
        self.position_mode = position_mode
        # MPNet hard-codes 1 whatever the config says; every other family reads pad_token_id.
        self.padding_idx = config.pad_token_id if padding_idx is None else padding_idx
        self.word_embeddings = nn.Embedding(config.vocab_size, dim, padding_idx=self.padding_idx)
        pos_pad = self.padding_idx if position_mode == "padding_offset" else None
        self.position_embeddings = nn.Embedding(
            config.max_position_embeddings, dim, padding_idx=pos_pad
        )
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, dim) if config.type_vocab_size > 0 else None
        )
        self.LayerNorm = nn.LayerNorm(dim, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def default_position_ids(self, input_ids: Tensor) -> Tensor:
        """``input_ids: (B, S) -> position_ids: (B, S)`` when the caller gave none."""
        if self.position_mode == "padding_offset":
            return roberta_position_ids(input_ids, self.padding_idx)
        b, s = input_ids.shape
        return torch.arange(s, device=input_ids.device).expand(b, s)

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        """``input_ids: (B, S) -> (B, S, E)``."""
        if position_ids is None:
            position_ids = self.default_position_ids(input_ids)
        x = self.word_embeddings(input_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))

    def forward_named(self, input_ids: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(input_ids, refs.get("position_ids"), refs.get("token_type_ids"))


class BertSelfAttention(nn.Module):
    """Query / key / value projections and scaled dot-product attention (PyTorch SDPA)."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(h, h)
        self.key = nn.Linear(h, h)
        self.value = nn.Linear(h, h)
        self.dropout_p = config.attention_probs_dropout_prob

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x: (B, S, H)``, ``mask``: additive ``(B, 1, 1, S)`` -> ``(B, S, H)``."""
        drop = self.dropout_p if self.training else 0.0
        return attend(self.query(x), self.key(x), self.value(x), self.num_heads, mask, drop)


class BertSelfOutput(nn.Module):
    """Output projection, dropout, residual add and post-LayerNorm."""

    def __init__(self, config: HfConfig, in_features: int | None = None) -> None:
        super().__init__()
        h = config.hidden_size
        self.dense = nn.Linear(in_features or h, h)
        self.LayerNorm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.intermediate_act_fn = Activation(config.hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.intermediate_act_fn(self.dense(x))


class BertLayer(nn.Module):
    """One post-LN transformer block: ``(B, S, H) -> (B, S, H)``.

    In a graph it reads the additive mask through ``.using(["attention_mask"])``.
    """

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertSelfOutput(config, in_features=config.intermediate_size)

    def forward(self, x: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        a = self.attention(x, attention_mask)
        return self.output(self.intermediate(a), a)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(x, refs.get("attention_mask"))


class BertPooler(nn.Module):
    """``tanh(dense(x[:, 0]))``: ``(B, S, H) -> (B, H)``."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.dense(x[:, 0]))


def _bert_backbone(config: HfConfig, task: str) -> tuple:
    emb = BertEmbeddings(config)
    encoder = layer_encoder(config, "encoder", BertLayer)
    # Base models keep the pooler on a side branch (output stays (B, S, H)); the sequence
    # classifier reads the pooled vector.
    pooler = BertPooler(config) if task in ("base", "seqcls") else None
    steps = [(encoder, ["attention_mask"], None)]
    graph = backbone_graph(
        "bert", emb, ["position_ids", "token_type_ids"], steps, pooler, task == "seqcls"
    )
    return graph, emb.word_embeddings


BERT = Family(
    "bert",
    prefix="bert",
    arch="Bert",
    roots=("embeddings", "encoder", "pooler"),
    config_defaults={"vocab_size": 30522, "pad_token_id": 0},
    backbone=_bert_backbone,
    heads={
        "seqcls": linear_head("classifier", lambda c: BERT.head_dropout(c), "labels"),
        "tokcls": TOKEN_HEAD,
        "qa": QA_HEAD,
        "mlm": module_head("cls", BertOnlyMLMHead, decoders),
    },
    ignore_keys=lambda c: (r"(^|\.)decoder\.(weight|bias)$",) if c.tie_word_embeddings else (),
)
