"""DeBERTa-v2 / v3: disentangled attention over relative positions (He et al. 2021,
"DeBERTa: Decoding-enhanced BERT with Disentangled Attention", eq. 2-4).

Scores are content-to-content plus content-to-position (``c2p``) and position-to-content
(``p2c``) terms, each scaled by ``1 / sqrt(D * (1 + #terms))``. Relative distances are log-bucketed
when ``position_buckets > 0`` (v3). Attribute names are transformers' own.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from flodl_core import ConfigError
from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig
from ._bert import BertIntermediate, BertSelfOutput
from ._family import QA_HEAD, Family, backbone_graph, linear_head, stack
from ._heads import BertOnlyMLMHead, DebertaV2OnlyMLMHead, decoders
from ._layers import Activation, merge_heads, split_heads


def log_bucket_position(rel: Tensor, bucket_size: int, max_position: int) -> Tensor:
    """Map relative distances ``rel: (S, S)`` onto ``bucket_size`` log-spaced buckets.

    Distances within ``bucket_size // 2`` stay exact; larger ones grow logarithmically up to
    ``max_position``. Same operations, in the same order and dtypes, as the reference code so
    that the rounding inside ``ceil`` agrees.
    """
    sign = torch.sign(rel)
    mid = bucket_size // 2
    abs_pos = torch.where(
        (rel < mid) & (rel > -mid), torch.tensor(mid - 1).type_as(rel), torch.abs(rel)
    )
    log_pos = (
        torch.ceil(
            torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)
        )
        + mid
    )
    return torch.where(abs_pos <= mid, rel.type_as(log_pos), log_pos * sign)


def relative_positions(seq_len: int, config: HfConfig, device: torch.device) -> Tensor:
    """``(1, S, S)`` long tensor of (bucketed) query-minus-key distances."""
    ids = torch.arange(seq_len, dtype=torch.long, device=device)
    rel = ids[:, None] - ids[None, :]
    if config.position_buckets > 0 and config.max_relative > 0:
        rel = log_bucket_position(rel, config.position_buckets, config.max_relative)
    return rel.to(torch.long).unsqueeze(0)


class DebertaV2Embeddings(nn.Module):
    """Word (+ absolute position) (+ token type) embeddings, optional projection, LayerNorm,
    then zeroed at padding: ``input_ids: (B, S) -> (B, S, H)``."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        dim = config.embedding_dim
        self.word_embeddings = nn.Embedding(config.vocab_size, dim, padding_idx=config.pad_token_id)
        self.position_embeddings = (
            nn.Embedding(config.max_position_embeddings, dim)
            if config.position_biased_input
            else None
        )
        self.token_type_embeddings = (
            nn.Embedding(config.type_vocab_size, dim) if config.type_vocab_size > 0 else None
        )
        self.embed_proj = (
            nn.Linear(dim, config.hidden_size, bias=False) if dim != config.hidden_size else None
        )
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(
        self,
        input_ids: Tensor,
        position_ids: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> Tensor:
        x = self.word_embeddings(input_ids)
        if self.position_embeddings is not None:
            if position_ids is None:
                b, s = input_ids.shape
                position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
            x = x + self.position_embeddings(position_ids)
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.token_type_embeddings(token_type_ids)
        if self.embed_proj is not None:
            x = self.embed_proj(x)
        x = self.LayerNorm(x)
        if attention_mask is not None:
            x = x * attention_mask.unsqueeze(-1).to(x.dtype)
        return self.dropout(x)

    def forward_named(self, input_ids: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(
            input_ids,
            refs.get("position_ids"),
            refs.get("token_type_ids"),
            refs.get("attention_mask"),
        )


class DisentangledSelfAttention(nn.Module):
    """``x: (B, S, H)`` -> ``(B, S, H)`` with content and relative-position attention terms."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = h // config.num_attention_heads
        self.query_proj = nn.Linear(h, h)
        self.key_proj = nn.Linear(h, h)
        self.value_proj = nn.Linear(h, h)
        self.share_att_key = config.share_att_key
        self.pos_att_type = tuple(config.pos_att_type)
        self.relative_attention = config.relative_attention
        self.span = config.rel_span
        if self.relative_attention and not self.share_att_key:
            if "c2p" in self.pos_att_type:
                self.pos_key_proj = nn.Linear(h, h)
            if "p2c" in self.pos_att_type:
                self.pos_query_proj = nn.Linear(h, h)
        self.pos_dropout = nn.Dropout(config.hidden_dropout_prob)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)

    def forward(
        self,
        x: Tensor,
        attention_mask: Tensor,
        relative_pos: Tensor | None = None,
        rel_embeddings: Tensor | None = None,
    ) -> Tensor:
        """``attention_mask``: bool ``(B, 1, S, S)``; ``relative_pos``: ``(1, S, S)``;
        ``rel_embeddings``: ``(2 * span, H)``."""
        q = split_heads(self.query_proj(x), self.num_heads)
        k = split_heads(self.key_proj(x), self.num_heads)
        v = split_heads(self.value_proj(x), self.num_heads)
        factor = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
        scale = torch.sqrt(torch.tensor(self.head_dim, dtype=torch.float) * factor).to(q.dtype)
        scores = q @ (k.transpose(-1, -2) / scale)
        if self.relative_attention and rel_embeddings is not None and relative_pos is not None:
            scores = scores + self._position_bias(q, k, relative_pos, rel_embeddings, scale)
        scores = scores.masked_fill(~attention_mask, torch.finfo(q.dtype).min)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        return merge_heads(probs @ v)

    def _position_bias(
        self, q: Tensor, k: Tensor, relative_pos: Tensor, rel: Tensor, scale: Tensor
    ) -> Tensor:
        rel = self.pos_dropout(rel[: 2 * self.span]).unsqueeze(0)  # (1, 2span, H)
        rel_pos = relative_pos.to(device=q.device, dtype=torch.long)  # (1, S, S)
        bias = torch.zeros((), dtype=q.dtype, device=q.device)
        if "c2p" in self.pos_att_type:  # content queries against position keys
            proj = self.key_proj if self.share_att_key else self.pos_key_proj
            bias = bias + self._gathered(q, proj(rel), rel_pos) / scale
        if "p2c" in self.pos_att_type:  # content keys against position queries, transposed
            proj = self.query_proj if self.share_att_key else self.pos_query_proj
            bias = bias + self._gathered(k, proj(rel), -rel_pos).transpose(-1, -2) / scale
        return bias

    def _gathered(self, x: Tensor, pos: Tensor, rel_pos: Tensor) -> Tensor:
        """``x: (B, H, S, D)`` against projected positions ``pos: (1, 2span, H*D)``, each row
        read at its relative offset ``rel_pos: (1, S, S)`` (clamped to the span): ``(B, H, S, S)``.
        """
        span = self.span
        scores = x @ split_heads(pos, self.num_heads).transpose(-1, -2)  # (B, H, S, 2span)
        b, h, s, _ = x.shape
        index = torch.clamp(rel_pos + span, 0, 2 * span - 1).expand(b, h, s, s)
        return torch.gather(scores, -1, index)


class DebertaV2Attention(nn.Module):
    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.self = DisentangledSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(
        self, x: Tensor, mask: Tensor, relative_pos: Tensor | None, rel: Tensor | None
    ) -> Tensor:
        return self.output(self.self(x, mask, relative_pos, rel), x)


class DebertaV2Layer(nn.Module):
    """One block; in a graph it reads ``attention_pairs`` (bool ``(B, 1, S, S)``),
    ``relative_pos`` and the relative table (ref ``table_ref``: ``LayerNorm`` when the table is
    normalised, else ``rel_embeddings``) through ``.using([...])``."""

    def __init__(self, config: HfConfig, table_ref: str = "rel_embeddings") -> None:
        super().__init__()
        self.table_ref = table_ref
        self.attention = DebertaV2Attention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertSelfOutput(config, in_features=config.intermediate_size)

    def forward(
        self,
        x: Tensor,
        attention_mask: Tensor,
        relative_pos: Tensor | None = None,
        rel_embeddings: Tensor | None = None,
    ) -> Tensor:
        a = self.attention(x, attention_mask, relative_pos, rel_embeddings)
        return self.output(self.intermediate(a), a)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(
            x, refs["attention_pairs"], refs.get("relative_pos"), refs.get(self.table_ref)
        )


def pairwise_mask(attention_mask: Tensor) -> Tensor:
    """``(B, S)`` 0/1 -> bool ``(B, 1, S, S)``: query i may attend key j iff both are tokens."""
    m = attention_mask.to(torch.bool)
    return (m[:, None, :, None] & m[:, None, None, :]).contiguous()


class PairwiseMask(nn.Module):
    """Graph node: the pairwise mask from the ``attention_mask`` ref (the stream is ignored)."""

    def forward(self, x: Tensor) -> Tensor:  # without refs: every position is a token
        return torch.ones(x.shape[0], 1, x.shape[1], x.shape[1], dtype=torch.bool, device=x.device)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return pairwise_mask(refs["attention_mask"])


class RelativePositionIds(nn.Module):
    """Graph node: ``x: (B, S, H) -> (1, S, S)`` bucketed relative distances."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        self.config = config

    def forward(self, x: Tensor) -> Tensor:
        return relative_positions(x.shape[1], self.config, x.device)


class RelativeTable(nn.Embedding):
    """Graph node holding ``encoder.rel_embeddings.weight``; outputs the ``(2 * span, H)`` table."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__(2 * config.rel_span, config.hidden_size)

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        return self.weight


class RelativeTableNorm(nn.LayerNorm):
    """Graph node holding ``encoder.LayerNorm``: normalises the ``rel_embeddings`` ref."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__(config.hidden_size, eps=config.layer_norm_eps)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return super().forward(refs["rel_embeddings"])


class ContextPooler(nn.Module):
    """``act(dense(dropout(x[:, 0])))``: ``(B, S, H) -> (B, H)``."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        size = config.pooler_hidden_size or config.hidden_size
        self.dense = nn.Linear(size, size)
        self.dropout = nn.Dropout(config.pooler_dropout)
        self.activation = Activation(config.pooler_hidden_act)

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.dense(self.dropout(x[:, 0])))


# ---- the family -------------------------------------------------------------------------------
def _encoder(config: HfConfig) -> Graph:
    """The pair mask, bucketed distances and relative table (+ LayerNorm) are side branches
    computed once per call; every layer reads them as refs."""
    if config.conv_kernel_size > 0:
        raise ConfigError(
            "DeBERTa-v2 checkpoints with a convolution layer (conv_kernel_size > 0: "
            "deberta-v2-xlarge / -xxlarge) are not supported; DeBERTa-v3 and deberta-v2 "
            "models without conv_kernel_size are"
        )
    fb = FlowBuilder().input(["attention_mask"])
    fb.fork(PairwiseMask()).using(["attention_mask"]).tag("attention_pairs")
    refs = ["attention_pairs"]
    table_ref = "rel_embeddings"
    if config.relative_attention:
        fb.fork(RelativePositionIds(config)).tag("relative_pos")
        fb.fork(RelativeTable(config)).tag("rel_embeddings")
        if "layer_norm" in [x.strip() for x in config.norm_rel_ebd.split("|")]:
            fb.fork(RelativeTableNorm(config)).using(["rel_embeddings"]).tag("LayerNorm")
            table_ref = "LayerNorm"
        refs += ["relative_pos", table_ref]
    blocks = [DebertaV2Layer(config, table_ref) for _ in range(config.num_hidden_layers)]
    fb.through(stack("layer", blocks, refs)).using(refs)
    return fb.label("encoder").build()


def _backbone(config: HfConfig, task: str) -> tuple[Graph, nn.Embedding]:
    emb = DebertaV2Embeddings(config)
    refs = ["position_ids", "token_type_ids", "attention_mask"]
    steps = [(_encoder(config), ["attention_mask"], None)]
    return backbone_graph("deberta", emb, refs, steps), emb.word_embeddings


def _head_dropout(config: HfConfig) -> float:
    p = config.raw.get("cls_dropout")
    return config.hidden_dropout_prob if p is None else float(p)


def _seqcls(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
    fb.through(ContextPooler(config)).tag("pooler")
    fb.through(nn.Dropout(_head_dropout(config)))
    fb.through(nn.Linear(config.hidden_size, config.num_labels)).tag("classifier")
    return []


def _mlm(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
    if config.legacy:
        head = BertOnlyMLMHead(config, config.embedding_dim)
        fb.through(head).tag("cls")
        return decoders(head)
    # Projects onto the embedding table itself: nothing to tie.
    fb.through(DebertaV2OnlyMLMHead(config, words)).tag("lm_predictions")
    return []


def _check(config: HfConfig) -> None:
    bad = set(config.pos_att_type) - {"c2p", "p2c"}
    if bad:
        raise ConfigError(
            f"config pos_att_type has unknown entries {sorted(bad)}; expected c2p and/or p2c"
        )


def _ignore(config: HfConfig) -> tuple[str, ...]:
    out = []
    if config.tie_word_embeddings:
        out.append(r"(^|\.)decoder\.(weight|bias)$")
    if not config.position_biased_input:
        out.append(r"embeddings\.position_embeddings\.weight$")
    if not config.relative_attention:
        out.append(r"encoder\.LayerNorm\.")  # built by transformers, used by nothing
    return tuple(out)


DEBERTA_V2 = Family(
    "deberta-v2",
    prefix="deberta",
    arch="DebertaV2",
    roots=("embeddings", "encoder"),
    config_defaults={
        "vocab_size": 128100,
        "hidden_size": 1536,
        "num_hidden_layers": 24,
        "num_attention_heads": 24,
        "intermediate_size": 6144,
        "type_vocab_size": 0,
        "layer_norm_eps": 1e-7,
        "pad_token_id": 0,
    },
    backbone=_backbone,
    heads={
        "seqcls": _seqcls,
        "tokcls": linear_head("classifier", lambda c: c.hidden_dropout_prob, "labels"),
        "qa": QA_HEAD,
        "mlm": _mlm,
    },
    attention_mask="binary",
    head_dropout=_head_dropout,
    check=_check,
    ignore_keys=_ignore,
    positions_used=lambda c: c.position_biased_input,
)
