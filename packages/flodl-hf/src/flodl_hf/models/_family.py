"""``Family``: everything that differs between two encoder families, as one value.

Each family file (``_bert.py``, ``_mpnet.py`` ...) ends with one declaration::

    BERT = Family(
        "bert", prefix="bert", arch="Bert", roots=("embeddings", "encoder", "pooler"),
        config_defaults={...}, backbone=standard_backbone(...), heads={"seqcls": ..., ...},
    )

and :func:`~flodl_hf.models.build`, :class:`~flodl_hf.HfConfig` and :class:`~flodl_hf.HfModel`
read only these fields: adding a family is adding a file and one line in ``_registry.py``.

Builders take the config and return modules; heads append to a ``FlowBuilder`` that already
runs the backbone and return the vocabulary decoders to tie to the word embeddings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig

#: ``(config, task) -> (labeled backbone graph, word-embedding module)``.
BackboneBuilder = Callable[[HfConfig, str], tuple[Graph, nn.Embedding]]
#: ``(builder running the backbone, config, word embeddings) -> decoders to tie``.
HeadBuilder = Callable[[FlowBuilder, HfConfig, nn.Embedding], list[nn.Linear]]

#: Task names, in the order of the ``AutoModel*`` classes.
TASKS: tuple[str, ...] = ("base", "seqcls", "tokcls", "qa", "mlm")
#: The graph's auxiliary inputs (refs), after ``input_ids``.
INPUTS: tuple[str, ...] = ("attention_mask", "position_ids", "token_type_ids")

_SUFFIX = {
    "base": "Model",
    "seqcls": "ForSequenceClassification",
    "tokcls": "ForTokenClassification",
    "qa": "ForQuestionAnswering",
    "mlm": "ForMaskedLM",
}


def _default_head_dropout(config: HfConfig) -> float:
    p = config.classifier_dropout
    return config.hidden_dropout_prob if p is None else float(p)


@dataclass(frozen=True)
class Family:
    """One encoder family (see the module docstring).

    ``config_defaults``: values transformers assumes when ``config.json`` leaves a field out;
    ``key_renames``: the family's ``config.json`` names -> :class:`HfConfig` fields (written back
    under the family's names); ``fixed``: values the family's modules hard-code (applied after
    reading, never written); ``unwritten``: fields left out of an exported ``config.json``.
    ``attention_mask``: ``"additive"`` (``(B, 1, 1, S)`` float, SDPA) or ``"binary"`` (``(B, S)``
    0/1 passed through). ``positions``: ``"arange"``, ``"padding_offset"`` (fairseq, counted from
    ``position_padding`` or ``pad_token_id``) or ``"rotary"`` (no table, no length limit).
    ``ignore_keys(config)``: regexes of checkpoint keys dropped silently (tied copies ...).
    """

    model_type: str
    prefix: str
    arch: str
    roots: tuple[str, ...]
    backbone: BackboneBuilder
    heads: Mapping[str, HeadBuilder]
    config_defaults: Mapping[str, Any] = field(default_factory=dict)
    key_renames: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    unwritten: frozenset[str] = frozenset()
    attention_mask: str = "additive"
    positions: str = "arange"
    position_padding: int | None = None
    ignore_keys: Callable[[HfConfig], Sequence[str]] = lambda config: ()
    head_dropout: Callable[[HfConfig], float] = _default_head_dropout
    check: Callable[[HfConfig], None] = lambda config: None
    positions_used: Callable[[HfConfig], bool] = lambda config: True

    @property
    def tasks(self) -> tuple[str, ...]:
        return ("base", *(t for t in TASKS if t in self.heads))

    def architecture(self, task: str) -> str:
        """transformers' class name for ``task`` (``BertForMaskedLM`` ...)."""
        return self.arch + _SUFFIX[task]

    def pad_for_positions(self, config: HfConfig) -> int:
        return config.pad_token_id if self.position_padding is None else self.position_padding


# ---- helpers shared by the family files ---------------------------------------------------------
def stack(label: str, layers: Sequence[nn.Module], refs: Sequence[str]) -> Graph:
    """A labeled graph running ``layers`` in order, nodes tagged ``"0"`` .. ``"N-1"``, each
    reading ``refs``."""
    fb = FlowBuilder().input(list(refs))
    for i, layer in enumerate(layers):
        fb.through(layer).using(list(refs)).tag(str(i))
    return fb.label(label).build()


def layer_encoder(config: HfConfig, label: str, block: Callable[[HfConfig], nn.Module]) -> Graph:
    """``label`` graph holding ``layer.0 .. layer.N-1`` blocks that read the attention mask."""
    blocks = [block(config) for _ in range(config.num_hidden_layers)]
    layers = stack("layer", blocks, ["attention_mask"])
    fb = FlowBuilder().input(["attention_mask"]).through(layers).using(["attention_mask"])
    return fb.label(label).build()


def backbone_graph(
    prefix: str,
    embeddings: nn.Module,
    embedding_refs: Sequence[str],
    steps: Sequence[tuple[nn.Module, Sequence[str], str | None]],
    pooler: nn.Module | None = None,
    pool: bool = False,
) -> Graph:
    """``embeddings`` then each ``(module, refs, tag)`` step; ``pooler`` forks off (base models
    keep ``(B, S, H)``) or, with ``pool=True``, replaces the stream (``(B, H)``)."""
    fb = FlowBuilder(embeddings).input(list(INPUTS)).using(list(embedding_refs)).tag("embeddings")
    for module, refs, tag in steps:
        fb.through(module)
        if refs:
            fb.using(list(refs))
        if tag:
            fb.tag(tag)
    if pooler is not None:
        (fb.through(pooler) if pool else fb.fork(pooler)).tag("pooler")
    return fb.label(prefix).build()


def linear_head(tag: str, dropout: Callable[[HfConfig], float] | None, outputs: str) -> HeadBuilder:
    """``dropout -> Linear(H, C)`` tagged ``tag``; ``outputs`` is ``"labels"`` or ``"span"`` (2)."""

    def build(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
        if dropout is not None:
            fb.through(nn.Dropout(dropout(config)))
        n = config.num_labels if outputs == "labels" else 2
        fb.through(nn.Linear(config.hidden_size, n)).tag(tag)
        return []

    return build


def module_head(
    tag: str, make: Callable[[HfConfig], nn.Module], decoders: Callable[[nn.Module], list] | None
) -> HeadBuilder:
    """One head module tagged ``tag``; ``decoders(head)`` lists the Linears to tie."""

    def build(fb: FlowBuilder, config: HfConfig, words: nn.Embedding) -> list[nn.Linear]:
        head = make(config)
        fb.through(head).tag(tag)
        return decoders(head) if decoders is not None else []

    return build


TOKEN_HEAD = linear_head("classifier", _default_head_dropout, "labels")
QA_HEAD = linear_head("qa_outputs", None, "span")
