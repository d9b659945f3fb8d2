"""Task heads, under the attribute names each family's checkpoints use.

Masked-LM decoders share their weight with the word embeddings (``tie_word_embeddings``); the
tie is made by :func:`tie_decoder` after construction and again after loading, because loading
with ``assign=True`` replaces the embedding's parameter object.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._config import HfConfig
from ._layers import Activation


class FirstToken(nn.Module):
    """``(B, S, H) -> (B, H)``: the ``[CLS]`` / ``<s>`` position."""

    def forward(self, x: Tensor) -> Tensor:
        return x[:, 0]


class BertPredictionHeadTransform(nn.Module):
    """``dense -> act -> LayerNorm``, ``(B, S, H) -> (B, S, out)``."""

    def __init__(self, config: HfConfig, out_features: int | None = None) -> None:
        super().__init__()
        out = out_features or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, out)
        self.transform_act_fn = Activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(out, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(self.transform_act_fn(self.dense(x)))


class _TiedDecoder(nn.Module):
    """A vocabulary projection whose weight may be the word-embedding table.

    Tied (the usual case), HF also ties ``decoder.bias`` to the head's ``bias``: the decoder is
    then a bias-free Linear and ``bias`` is used. Untied, the decoder keeps its own bias, which
    is the one transformers applies (the head's ``bias`` stays, unused, as in transformers).
    """

    decoder: nn.Linear
    bias: nn.Parameter

    def _make_decoder(self, config: HfConfig, width: int) -> None:
        tied = config.tie_word_embeddings
        self.decoder = nn.Linear(width, config.vocab_size, bias=not tied)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def project(self, x: Tensor) -> Tensor:
        bias = self.decoder.bias if self.decoder.bias is not None else self.bias
        return F.linear(x, self.decoder.weight, bias)


class BertLMPredictionHead(_TiedDecoder):
    def __init__(self, config: HfConfig, width: int | None = None) -> None:
        super().__init__()
        width = width or config.hidden_size
        self.transform = BertPredictionHeadTransform(config, width)
        self._make_decoder(config, width)

    def forward(self, x: Tensor) -> Tensor:
        return self.project(self.transform(x))


class BertOnlyMLMHead(nn.Module):
    """BERT's ``cls.predictions`` (and legacy DeBERTa's, with ``width = embedding_size``)."""

    def __init__(self, config: HfConfig, width: int | None = None) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config, width)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, S, H) -> (B, S, V)``."""
        return self.predictions(x)


class RobertaLMHead(_TiedDecoder):
    """``lm_head``: dense -> gelu (always erf GELU) -> layer_norm -> decoder."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        h = config.hidden_size
        self.dense = nn.Linear(h, h)
        self.layer_norm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self._make_decoder(config, h)

    def forward(self, x: Tensor) -> Tensor:
        return self.project(self.layer_norm(F.gelu(self.dense(x))))


class AlbertMLMHead(_TiedDecoder):
    """``predictions``: dense (H -> E) -> act -> LayerNorm -> decoder (E -> V)."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        e = config.embedding_dim
        self.dense = nn.Linear(config.hidden_size, e)
        self.activation = Activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(e, eps=config.layer_norm_eps)
        self._make_decoder(config, e)

    def forward(self, x: Tensor) -> Tensor:
        return self.project(self.LayerNorm(self.activation(self.dense(x))))


class DebertaV2LMHead(nn.Module):
    """Non-legacy DeBERTa MLM (``lm_predictions.lm_head``): projects onto the embedding table
    itself, so it holds no decoder; the word-embedding module is handed in."""

    def __init__(self, config: HfConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        h = config.hidden_size
        self.dense = nn.Linear(h, h)
        self.transform_act_fn = Activation(config.hidden_act)
        self.LayerNorm = nn.LayerNorm(h, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        # Not registered as a submodule: the table belongs to the embeddings.
        self.__dict__["_words"] = word_embeddings

    def forward(self, x: Tensor) -> Tensor:
        x = self.LayerNorm(self.transform_act_fn(self.dense(x)))
        return F.linear(x, self.__dict__["_words"].weight, self.bias)


class DebertaV2OnlyMLMHead(nn.Module):
    def __init__(self, config: HfConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        self.lm_head = DebertaV2LMHead(config, word_embeddings)

    def forward(self, x: Tensor) -> Tensor:
        return self.lm_head(x)


class RobertaClassificationHead(nn.Module):
    """``classifier``: first token -> dropout -> dense -> tanh -> dropout -> out_proj.

    RoBERTa, XLM-R and MPNet use tanh; ELECTRA the same head with (erf) GELU.
    """

    def __init__(self, config: HfConfig, activation: str = "tanh") -> None:
        super().__init__()
        h = config.hidden_size
        self.dense = nn.Linear(h, h)
        self.dropout = nn.Dropout(config.head_dropout)
        self.activation = Activation(activation)
        self.out_proj = nn.Linear(h, config.num_labels)

    def forward(self, x: Tensor) -> Tensor:
        """``(B, S, H) -> (B, C)``."""
        x = self.dropout(x[:, 0])
        return self.out_proj(self.dropout(self.activation(self.dense(x))))


def decoders(head: nn.Module) -> list[nn.Linear]:
    """The vocabulary projections inside ``head`` (the Linears to tie to the embeddings)."""
    return [m.decoder for m in head.modules() if isinstance(m, _TiedDecoder)]
