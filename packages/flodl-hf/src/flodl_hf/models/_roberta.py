"""RoBERTa and XLM-RoBERTa: BERT's blocks with fairseq positions (counted from the padding id,
hence 514 position rows) and a classification head that pools the first token itself."""

from __future__ import annotations

from torch import nn

from flodl_graph import Graph

from .._config import HfConfig
from ._bert import BertEmbeddings, BertLayer, BertPooler
from ._family import QA_HEAD, TOKEN_HEAD, Family, backbone_graph, layer_encoder, module_head
from ._heads import RobertaClassificationHead, RobertaLMHead, decoders


def _roberta_backbone(config: HfConfig, task: str) -> tuple[Graph, nn.Embedding]:
    emb = BertEmbeddings(config, "padding_offset")
    encoder = layer_encoder(config, "encoder", BertLayer)
    pooler = BertPooler(config) if task == "base" else None
    steps = [(encoder, ["attention_mask"], None)]
    graph = backbone_graph("roberta", emb, ["position_ids", "token_type_ids"], steps, pooler)
    return graph, emb.word_embeddings


_HEADS = {
    "seqcls": module_head("classifier", RobertaClassificationHead, None),
    "tokcls": TOKEN_HEAD,
    "qa": QA_HEAD,
    "mlm": module_head("lm_head", RobertaLMHead, decoders),
}


def _tied(config: HfConfig) -> tuple[str, ...]:
    return (r"(^|\.)decoder\.(weight|bias)$",) if config.tie_word_embeddings else ()


ROBERTA = Family(
    "roberta",
    prefix="roberta",
    arch="Roberta",
    roots=("embeddings", "encoder", "pooler"),
    config_defaults={"vocab_size": 50265, "pad_token_id": 1},
    backbone=_roberta_backbone,
    heads=_HEADS,
    positions="padding_offset",
    ignore_keys=_tied,
)

XLM_ROBERTA = Family(
    "xlm-roberta",
    prefix="roberta",
    arch="XLMRoberta",
    roots=("embeddings", "encoder", "pooler"),
    config_defaults={"vocab_size": 30522, "pad_token_id": 1},
    backbone=_roberta_backbone,
    heads=_HEADS,
    positions="padding_offset",
    ignore_keys=_tied,
)
