"""ELECTRA (Clark et al. 2020): BERT's blocks behind an embedding table that may be narrower than
the encoder (``embedding_size < hidden_size``, bridged by ``embeddings_project``), no pooler, GELU
classification head, and the generator's masked-LM head.

Discriminator and generator checkpoints share this layout; the discriminator's replaced-token
head (``discriminator_predictions``) is a pre-training head and is reported as unused.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig
from ._bert import BertEmbeddings, BertLayer
from ._family import QA_HEAD, TOKEN_HEAD, Family, backbone_graph, layer_encoder, module_head
from ._heads import RobertaClassificationHead


class ElectraGeneratorPredictions(nn.Module):
    """``generator_predictions``: dense (H -> E), erf GELU, LayerNorm: ``(B, S, H) -> (B, S, E)``;
    ``generator_lm_head`` (E -> V, tied to the word embeddings) follows as its own node."""

    def __init__(self, config: HfConfig) -> None:
        super().__init__()
        e = config.embedding_dim
        self.dense = nn.Linear(config.hidden_size, e)
        self.LayerNorm = nn.LayerNorm(e, eps=config.layer_norm_eps)

    def forward(self, x: Tensor) -> Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


def _backbone(config: HfConfig, task: str) -> tuple[Graph, nn.Embedding]:
    emb = BertEmbeddings(config)
    steps: list = []
    if config.embedding_dim != config.hidden_size:
        steps.append(
            (nn.Linear(config.embedding_dim, config.hidden_size), [], "embeddings_project")
        )
    steps.append((layer_encoder(config, "encoder", BertLayer), ["attention_mask"], None))
    graph = backbone_graph("electra", emb, ["position_ids", "token_type_ids"], steps)
    return graph, emb.word_embeddings


def _mlm(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
    fb.through(ElectraGeneratorPredictions(config)).tag("generator_predictions")
    decoder = nn.Linear(config.embedding_dim, config.vocab_size)
    fb.through(decoder).tag("generator_lm_head")
    return [decoder]


ELECTRA = Family(
    "electra",
    prefix="electra",
    arch="Electra",
    roots=("embeddings", "embeddings_project", "encoder"),
    config_defaults={
        "vocab_size": 30522,
        "embedding_size": 128,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
        "pad_token_id": 0,
    },
    backbone=_backbone,
    heads={
        "seqcls": module_head(
            "classifier", lambda c: RobertaClassificationHead(c, activation="gelu"), None
        ),
        "tokcls": TOKEN_HEAD,
        "qa": QA_HEAD,
        "mlm": _mlm,
    },
    ignore_keys=lambda c: (r"^generator_lm_head\.weight$",) if c.tie_word_embeddings else (),
)
