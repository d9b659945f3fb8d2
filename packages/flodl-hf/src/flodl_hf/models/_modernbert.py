"""ModernBERT (Warner et al. 2024, "Smarter, Better, Faster, Longer"): pre-LN blocks with rotary
positions (Su et al. 2021, RoFormer), attention alternating between global layers and local
sliding windows (every ``global_attn_every_n_layers``-th layer is global), GeGLU feed-forward
(Shazeer 2020), bias-free linears and norms by default.

Inputs are padded batches: the ``(B, S)`` attention mask becomes an additive mask and, for local
layers, is intersected with the band ``|i - j| <= local_attention // 2``. (transformers can also
run unpadded sequences through FlashAttention; the padded path computes the same values.) The
masks and the two rotary tables are side branches computed once per call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flodl_core import ConfigError
from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig
from ._family import Family, backbone_graph
from ._layers import Activation, check_activation, merge_heads

_FULL, _SLIDING = "full_attention", "sliding_attention"


@dataclass(frozen=True)
class ModernBertSettings:
    """The ModernBERT-only fields of ``config.json`` (kept in :attr:`HfConfig.raw`)."""

    layer_types: tuple[str, ...]
    rope_theta: dict[str, float]
    local_attention: int
    norm_bias: bool
    attention_bias: bool
    mlp_bias: bool
    classifier_bias: bool
    decoder_bias: bool
    classifier_pooling: str
    classifier_activation: str
    classifier_dropout: float
    mlp_dropout: float

    @classmethod
    def of(cls, config: HfConfig) -> ModernBertSettings:
        raw = config.raw
        types = raw.get("layer_types")
        if types is None:
            every = int(raw.get("global_attn_every_n_layers", 3))
            types = [_SLIDING if i % every else _FULL for i in range(config.num_hidden_layers)]
        rope = raw.get("rope_parameters") or {}
        theta = {
            _FULL: float(
                (rope.get(_FULL) or {}).get("rope_theta", raw.get("global_rope_theta", 160000.0))
            ),
            _SLIDING: float(
                (rope.get(_SLIDING) or {}).get("rope_theta", raw.get("local_rope_theta", 10000.0))
            ),
        }
        for kind, params in rope.items():
            rope_type = (params or {}).get("rope_type", "default")
            if rope_type != "default":
                raise ConfigError(
                    f"config rope_parameters[{kind!r}] rope_type {rope_type!r} is not supported; "
                    "only the default rotary embedding is"
                )
        return cls(
            layer_types=tuple(types),
            rope_theta=theta,
            local_attention=int(raw.get("local_attention", 128)),
            norm_bias=bool(raw.get("norm_bias", False)),
            attention_bias=bool(raw.get("attention_bias", False)),
            mlp_bias=bool(raw.get("mlp_bias", False)),
            classifier_bias=bool(raw.get("classifier_bias", False)),
            decoder_bias=bool(raw.get("decoder_bias", True)),
            classifier_pooling=str(raw.get("classifier_pooling", "cls")),
            classifier_activation=str(raw.get("classifier_activation", "gelu")),
            classifier_dropout=float(raw.get("classifier_dropout") or 0.0),
            mlp_dropout=float(raw.get("mlp_dropout") or 0.0),
        )


def rotary_cos_sin(position_ids: Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> Tensor:
    """``position_ids: (B, S)`` -> ``(2, B, S, D)``: cos and sin of ``position * theta^(-2i/D)``,
    each frequency repeated over the two halves (the rotate-half layout)."""
    exponent = (
        torch.arange(0, head_dim, 2, dtype=torch.float, device=position_ids.device) / head_dim
    )
    inv_freq = 1.0 / (theta**exponent)
    freqs = position_ids[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return torch.stack((emb.cos(), emb.sin())).to(dtype)


def _rotate_half(x: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rotary(x: Tensor, cos_sin: Tensor) -> Tensor:
    """``x: (B, heads, S, D)`` rotated by ``cos_sin: (2, B, S, D)``, computed in float32."""
    cos, sin = cos_sin[0].unsqueeze(1), cos_sin[1].unsqueeze(1)
    xf = x.float()
    return (xf * cos + _rotate_half(xf) * sin).to(x.dtype)


class Rotary(nn.Module):
    """Graph node: the ``position_ids`` ref -> ``(2, B, S, D)`` cos/sin for one rope base."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.head_dim, self.theta = head_dim, theta

    def forward(self, x: Tensor) -> Tensor:
        b, s = x.shape[:2]
        ids = torch.arange(s, device=x.device).expand(b, s)
        return rotary_cos_sin(ids, self.head_dim, self.theta, x.dtype)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        ids = refs.get("position_ids")
        if ids is None:
            return self.forward(x)
        return rotary_cos_sin(ids, self.head_dim, self.theta, x.dtype)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, theta={self.theta:g}"


class SlidingWindowMask(nn.Module):
    """Graph node: the additive ``attention_mask`` ref ``(B, 1, 1, S)`` intersected with the band
    ``|i - j| <= window`` -> boolean ``(B, 1, S, S)`` (True: may attend).

    Boolean, not additive: a padded query far from every real token has no key left, and SDPA
    then returns zeros for it, as transformers does (an additive mask would average every key).
    """

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window

    def _band(self, s: int, device: torch.device) -> Tensor:
        pos = torch.arange(s, device=device)
        return (pos[None, :] - pos[:, None]).abs() <= self.window

    def forward(self, x: Tensor) -> Tensor:
        return self._band(x.shape[1], x.device)[None, None]

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        mask = refs.get("attention_mask")
        if mask is None:
            return self.forward(x)
        return (mask == 0) & self._band(x.shape[1], x.device)

    def extra_repr(self) -> str:
        return f"window={self.window}"


class ModernBertEmbeddings(nn.Module):
    """``tok_embeddings`` -> ``norm`` -> ``drop``: ``input_ids: (B, S) -> (B, S, H)``."""

    def __init__(self, config: HfConfig, s: ModernBertSettings) -> None:
        super().__init__()
        h = config.hidden_size
        self.tok_embeddings = nn.Embedding(config.vocab_size, h, padding_idx=config.pad_token_id)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps, bias=s.norm_bias)
        self.drop = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids: Tensor) -> Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.tok_embeddings


class ModernBertAttention(nn.Module):
    """Fused ``Wqkv``, rotary on queries and keys, SDPA, ``Wo``: ``(B, S, H) -> (B, S, H)``."""

    def __init__(self, config: HfConfig, s: ModernBertSettings) -> None:
        super().__init__()
        h = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.Wqkv = nn.Linear(h, 3 * h, bias=s.attention_bias)
        self.Wo = nn.Linear(h, h, bias=s.attention_bias)
        self.dropout_p = config.attention_probs_dropout_prob
        self.out_drop = nn.Dropout(self.dropout_p)

    def forward(self, x: Tensor, mask: Tensor | None, cos_sin: Tensor) -> Tensor:
        b, s, _ = x.shape
        q, k, v = self.Wqkv(x).view(b, s, 3, self.num_heads, self.head_dim).unbind(dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        q, k = apply_rotary(q, cos_sin), apply_rotary(k, cos_sin)
        drop = self.dropout_p if self.training else 0.0
        ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=drop)
        return self.out_drop(self.Wo(merge_heads(ctx)))


class ModernBertMLP(nn.Module):
    """GeGLU: ``Wo(drop(act(a) * g))`` with ``a, g = Wi(x).chunk(2)``."""

    def __init__(self, config: HfConfig, s: ModernBertSettings) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.Wi = nn.Linear(h, 2 * i, bias=s.mlp_bias)
        self.act = Activation(config.hidden_act)
        self.drop = nn.Dropout(s.mlp_dropout)
        self.Wo = nn.Linear(i, h, bias=s.mlp_bias)

    def forward(self, x: Tensor) -> Tensor:
        a, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(a) * gate))


class ModernBertLayer(nn.Module):
    """Pre-LN block (the first layer has no ``attn_norm``: the embeddings end with a norm).

    In a graph it reads its mask ref (``attention_mask`` for global layers, ``sliding_mask`` for
    local ones) and its rotary ref (``rope_full`` / ``rope_sliding``).
    """

    def __init__(self, config: HfConfig, s: ModernBertSettings, index: int) -> None:
        super().__init__()
        h, eps = config.hidden_size, config.layer_norm_eps
        self.attention_type = s.layer_types[index]
        local = self.attention_type == _SLIDING
        self.mask_ref = "sliding_mask" if local else "attention_mask"
        self.rope_ref = "rope_sliding" if local else "rope_full"
        self.attn_norm = nn.Identity() if index == 0 else nn.LayerNorm(h, eps=eps, bias=s.norm_bias)
        self.attn = ModernBertAttention(config, s)
        self.mlp_norm = nn.LayerNorm(h, eps=eps, bias=s.norm_bias)
        self.mlp = ModernBertMLP(config, s)

    def forward(self, x: Tensor, mask: Tensor | None, cos_sin: Tensor) -> Tensor:
        x = x + self.attn(self.attn_norm(x), mask, cos_sin)
        return x + self.mlp(self.mlp_norm(x))

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        return self.forward(x, refs.get(self.mask_ref), refs[self.rope_ref])


class ModernBertPredictionHead(nn.Module):
    """``head``: dense -> ``classifier_activation`` -> norm, ``(..., H) -> (..., H)``."""

    def __init__(self, config: HfConfig, s: ModernBertSettings) -> None:
        super().__init__()
        h = config.hidden_size
        self.dense = nn.Linear(h, h, bias=s.classifier_bias)
        self.act = Activation(s.classifier_activation)
        self.norm = nn.LayerNorm(h, eps=config.layer_norm_eps, bias=s.norm_bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.act(self.dense(x)))


class SequencePool(nn.Module):
    """``(B, S, H) -> (B, H)``: the first token (``"cls"``) or the mean over real tokens
    (``"mean"``, reading the additive ``attention_mask`` ref)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, x: Tensor) -> Tensor:
        return x[:, 0] if self.mode == "cls" else x.mean(dim=1)

    def forward_named(self, x: Tensor, refs: dict[str, Tensor]) -> Tensor:
        mask = refs.get("attention_mask")
        if self.mode == "cls" or mask is None:
            return self.forward(x)
        keep = (mask[:, 0, 0, :] == 0).to(x.dtype).unsqueeze(-1)  # (B, S, 1)
        return (x * keep).sum(dim=1) / keep.sum(dim=1)


# ---- the family -------------------------------------------------------------------------------
def _layers(config: HfConfig, s: ModernBertSettings) -> Graph:
    refs = ["attention_mask", "position_ids"]
    fb = FlowBuilder().input(refs)
    kinds = set(s.layer_types)
    if _SLIDING in kinds:
        fb.fork(SlidingWindowMask(s.local_attention // 2)).using(["attention_mask"])
        fb.tag("sliding_mask")
    for kind, ref in ((_FULL, "rope_full"), (_SLIDING, "rope_sliding")):
        if kind in kinds:
            fb.fork(Rotary(config.head_dim, s.rope_theta[kind])).using(["position_ids"]).tag(ref)
    for i in range(config.num_hidden_layers):
        layer = ModernBertLayer(config, s, i)
        fb.through(layer).using([layer.mask_ref, layer.rope_ref]).tag(str(i))
    return fb.label("layers").build()


def _backbone(config: HfConfig, task: str) -> tuple[Graph, nn.Embedding]:
    s = ModernBertSettings.of(config)
    emb = ModernBertEmbeddings(config, s)
    norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps, bias=s.norm_bias)
    steps = [
        (_layers(config, s), ["attention_mask", "position_ids"], None),
        (norm, [], "final_norm"),
    ]
    return backbone_graph("model", emb, [], steps), emb.tok_embeddings


def _classifier(outputs: str, pool: bool):
    def build(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
        s = ModernBertSettings.of(config)
        if pool:
            fb.through(SequencePool(s.classifier_pooling)).using(["attention_mask"])
        fb.through(ModernBertPredictionHead(config, s)).tag("head")
        fb.through(nn.Dropout(s.classifier_dropout))
        n = config.num_labels if outputs == "labels" else 2
        fb.through(nn.Linear(config.hidden_size, n)).tag("classifier")
        return []

    return build


def _mlm(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
    s = ModernBertSettings.of(config)
    fb.through(ModernBertPredictionHead(config, s)).tag("head")
    decoder = nn.Linear(config.hidden_size, config.vocab_size, bias=s.decoder_bias)
    fb.through(decoder).tag("decoder")
    return [decoder]


def _check(config: HfConfig) -> None:
    s = ModernBertSettings.of(config)
    if s.classifier_pooling not in ("cls", "mean"):
        raise ConfigError(
            f"config classifier_pooling {s.classifier_pooling!r} is not supported; expected "
            "'cls' or 'mean'"
        )
    check_activation(s.classifier_activation, "classifier_activation")
    bad = sorted(set(s.layer_types) - {_FULL, _SLIDING})
    if len(s.layer_types) != config.num_hidden_layers or bad:
        raise ConfigError(
            f"config layer_types must list {config.num_hidden_layers} entries of "
            f"{_FULL!r} / {_SLIDING!r}, got {list(s.layer_types)!r}"
        )
    if s.local_attention < 2:
        raise ConfigError(f"config local_attention must be >= 2, got {s.local_attention}")


MODERNBERT = Family(
    "modernbert",
    prefix="model",
    arch="ModernBert",
    roots=("embeddings", "layers", "final_norm"),
    config_defaults={
        "vocab_size": 50368,
        "hidden_size": 768,
        "intermediate_size": 1152,
        "num_hidden_layers": 22,
        "num_attention_heads": 12,
        "hidden_act": "gelu",
        "max_position_embeddings": 8192,
        "layer_norm_eps": 1e-5,
        "pad_token_id": 50283,
        "type_vocab_size": 0,
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
    },
    key_renames={
        "hidden_activation": "hidden_act",
        "norm_eps": "layer_norm_eps",
        "embedding_dropout": "hidden_dropout_prob",
        "attention_dropout": "attention_probs_dropout_prob",
    },
    unwritten=frozenset({"type_vocab_size"}),
    backbone=_backbone,
    heads={
        "seqcls": _classifier("labels", pool=True),
        "tokcls": _classifier("labels", pool=False),
        "qa": _classifier("span", pool=False),
        "mlm": _mlm,
    },
    positions="rotary",
    head_dropout=lambda c: ModernBertSettings.of(c).classifier_dropout,
    check=_check,
    ignore_keys=lambda c: (r"^decoder\.weight$",) if c.tie_word_embeddings else (),
)
