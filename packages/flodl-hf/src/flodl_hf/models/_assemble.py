"""The six families as flodl graphs, built with ``FlowBuilder``.

Every model is a graph ``(input_ids; attention_mask, position_ids, token_type_ids) -> output``
whose submodule names follow HF's dotted checkpoint keys::

    (task graph)
      bert                 labeled backbone graph (roberta, distilbert, albert, deberta)
        embeddings         node
        encoder            labeled graph (DistilBERT: transformer)
          layer            labeled graph
            0 .. N-1       one node per transformer block
        pooler             node (fork on base models, whose output stays the hidden states)
      classifier ...       head nodes, tagged with their HF names

so ``state_dict()`` keys are HF keys and tree paths (``"bert.encoder.layer.11"``) address the
same modules. ALBERT's encoder is one node: its layers share weights across steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from flodl_core import ConfigError
from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig
from ._albert import AlbertPooler, AlbertTransformer
from ._bert import BertEmbeddings, BertLayer, BertPooler
from ._deberta_v2 import (
    ContextPooler,
    DebertaV2Embeddings,
    DebertaV2Layer,
    PairwiseMask,
    RelativePositionIds,
    RelativeTable,
    RelativeTableNorm,
)
from ._distilbert import TransformerBlock
from ._heads import (
    AlbertMLMHead,
    BertOnlyMLMHead,
    DebertaV2OnlyMLMHead,
    FirstToken,
    RobertaClassificationHead,
    RobertaLMHead,
    decoders,
)
from ._layers import Activation

TASKS: tuple[str, ...] = ("base", "seqcls", "tokcls", "qa", "mlm")
INPUTS: tuple[str, ...] = ("attention_mask", "position_ids", "token_type_ids")

_SUFFIX = {
    "base": "Model",
    "seqcls": "ForSequenceClassification",
    "tokcls": "ForTokenClassification",
    "qa": "ForQuestionAnswering",
    "mlm": "ForMaskedLM",
}


@dataclass(frozen=True)
class Family:
    """What differs between families at the graph level."""

    model_type: str
    prefix: str  # the backbone's label, HF's ``base_model_prefix``
    arch: str  # transformers' class-name stem
    roots: tuple[str, ...]  # the backbone's top-level children

    def architecture(self, task: str) -> str:
        return self.arch + _SUFFIX[task]


FAMILIES: dict[str, Family] = {
    "bert": Family("bert", "bert", "Bert", ("embeddings", "encoder", "pooler")),
    "roberta": Family("roberta", "roberta", "Roberta", ("embeddings", "encoder", "pooler")),
    "xlm-roberta": Family(
        "xlm-roberta", "roberta", "XLMRoberta", ("embeddings", "encoder", "pooler")
    ),
    "distilbert": Family("distilbert", "distilbert", "DistilBert", ("embeddings", "transformer")),
    "albert": Family("albert", "albert", "Albert", ("embeddings", "encoder", "pooler")),
    "deberta-v2": Family("deberta-v2", "deberta", "DebertaV2", ("embeddings", "encoder")),
}


@dataclass
class Assembly:
    """A built model graph and what loading / export need to know about it."""

    graph: Graph
    family: Family
    word_embeddings: nn.Embedding
    tied: list[nn.Linear]  # decoders sharing the word-embedding table (when tied)


def _stack(label: str, layers: Sequence[nn.Module], refs: list[str]) -> Graph:
    """A labeled graph running ``layers`` in order, nodes tagged ``"0"`` .. ``"N-1"``."""
    fb = FlowBuilder().input(refs)
    for i, layer in enumerate(layers):
        fb.through(layer).using(refs).tag(str(i))
    return fb.label(label).build()


def _encoder(config: HfConfig, label: str, block: type[nn.Module]) -> Graph:
    blocks = [block(config) for _ in range(config.num_hidden_layers)]
    layers = _stack("layer", blocks, ["attention_mask"])
    fb = FlowBuilder().input(["attention_mask"]).through(layers).using(["attention_mask"])
    return fb.label(label).build()


def _deberta_encoder(config: HfConfig) -> Graph:
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
    fb.through(_stack("layer", blocks, refs)).using(refs)
    return fb.label("encoder").build()


def _backbone(config: HfConfig, family: Family, task: str) -> tuple[Graph, nn.Embedding]:
    inputs = list(INPUTS)
    mt = family.model_type
    if mt == "deberta-v2":
        emb: nn.Module = DebertaV2Embeddings(config)
        emb_refs = [*inputs[1:], "attention_mask"]
        encoder: nn.Module = _deberta_encoder(config)
    else:
        mode = "padding_offset" if mt in ("roberta", "xlm-roberta") else "arange"
        emb = BertEmbeddings(config, mode)
        emb_refs = inputs[1:]
        if mt == "distilbert":
            encoder = _encoder(config, "transformer", TransformerBlock)
        elif mt == "albert":
            encoder = AlbertTransformer(config)
        else:
            encoder = _encoder(config, "encoder", BertLayer)
    fb = FlowBuilder(emb).input(inputs).using(emb_refs).tag("embeddings")
    fb.through(encoder).using(["attention_mask"])
    if mt == "albert":
        fb.tag("encoder")
    # Base models keep the pooler on a side branch (their output stays (B, S, H)); BERT and
    # ALBERT classifiers read the pooled vector. RoBERTa's classifier pools itself; DistilBERT
    # and DeBERTa backbones have no pooler.
    pooler = AlbertPooler if mt == "albert" else BertPooler
    if task == "base" and mt in ("bert", "roberta", "xlm-roberta", "albert"):
        fb.fork(pooler(config)).tag("pooler")
    elif task == "seqcls" and mt in ("bert", "albert"):
        fb.through(pooler(config)).tag("pooler")
    return fb.label(family.prefix).build(), emb.word_embeddings  # type: ignore[return-value]


def _head(fb: FlowBuilder, config: HfConfig, mt: str, task: str, words: nn.Embedding) -> list:
    """Append ``task``'s head to ``fb``; returns the decoders to tie to ``words``."""
    h, c = config.hidden_size, config.num_labels
    bert_like = mt in ("bert", "albert")
    if task == "seqcls":
        if mt in ("roberta", "xlm-roberta"):
            fb.through(RobertaClassificationHead(config)).tag("classifier")
        elif mt == "distilbert":
            fb.through(FirstToken()).through(nn.Linear(h, h)).tag("pre_classifier")
            fb.through(nn.ReLU()).through(nn.Dropout(config.seq_classif_dropout))
            fb.through(nn.Linear(h, c)).tag("classifier")
        elif mt == "deberta-v2":
            fb.through(ContextPooler(config)).tag("pooler")
            fb.through(nn.Dropout(config.head_dropout)).through(nn.Linear(h, c)).tag("classifier")
        else:
            assert bert_like
            fb.through(nn.Dropout(config.head_dropout)).through(nn.Linear(h, c)).tag("classifier")
    elif task == "tokcls":
        p = (
            config.hidden_dropout_prob
            if mt in ("distilbert", "deberta-v2")
            else config.head_dropout
        )
        fb.through(nn.Dropout(p)).through(nn.Linear(h, c)).tag("classifier")
    elif task == "qa":
        if mt == "distilbert":
            fb.through(nn.Dropout(config.qa_dropout))
        fb.through(nn.Linear(h, 2)).tag("qa_outputs")
    elif task == "mlm":
        if mt == "bert":
            head: nn.Module = BertOnlyMLMHead(config)
            fb.through(head).tag("cls")
        elif mt in ("roberta", "xlm-roberta"):
            head = RobertaLMHead(config)
            fb.through(head).tag("lm_head")
        elif mt == "albert":
            head = AlbertMLMHead(config)
            fb.through(head).tag("predictions")
        elif mt == "deberta-v2" and config.legacy:
            head = BertOnlyMLMHead(config, config.embedding_dim)
            fb.through(head).tag("cls")
        elif mt == "deberta-v2":
            fb.through(DebertaV2OnlyMLMHead(config, words)).tag("lm_predictions")
            return []  # projects onto the embedding table directly: nothing to tie
        else:
            assert mt == "distilbert"
            projector = nn.Linear(h, config.vocab_size)
            fb.through(nn.Linear(h, h)).tag("vocab_transform")
            fb.through(Activation(config.hidden_act))
            fb.through(nn.LayerNorm(h, eps=config.layer_norm_eps)).tag("vocab_layer_norm")
            fb.through(projector).tag("vocab_projector")
            return [projector]
        return decoders(head)
    return []


def build(config: HfConfig, task: str) -> Assembly:
    """The graph of ``config``'s family for ``task`` (``base``, ``seqcls``, ``tokcls``, ``qa``,
    ``mlm``). Parameters are created on the current default device (``meta`` for loading)."""
    if task not in TASKS:
        raise ConfigError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    family = FAMILIES[config.model_type]
    backbone, words = _backbone(config, family, task)
    inputs = list(INPUTS)
    fb = FlowBuilder(backbone).input(inputs).using(inputs)
    tied = _head(fb, config, config.model_type, task, words)
    graph = fb.build()
    if config.tie_word_embeddings:
        for linear in tied:
            linear.weight = words.weight
    return Assembly(graph, family, words, tied if config.tie_word_embeddings else [])
