"""``build``: a family's graph for one task, from its :class:`~flodl_hf.models.Family` alone.

Every model is a graph ``(input_ids; attention_mask, position_ids, token_type_ids) -> output``
whose submodule names follow HF's dotted checkpoint keys::

    (task graph)
      bert                 labeled backbone graph (roberta, distilbert, albert, deberta, ...)
        embeddings         node
        encoder            labeled graph (DistilBERT: transformer; ModernBERT: layers)
          layer            labeled graph
            0 .. N-1       one node per transformer block
        pooler             node (fork on base models, whose output stays the hidden states)
      classifier ...       head nodes, tagged with their HF names

so ``state_dict()`` keys are HF keys and tree paths (``"bert.encoder.layer.11"``) address the
same modules. ALBERT's encoder is one node: its layers share weights across steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from flodl_core import ConfigError, format_choices
from flodl_graph import FlowBuilder, Graph

from .._config import HfConfig
from ._family import INPUTS, TASKS, Family
from ._registry import family_of


@dataclass
class Assembly:
    """A built model graph and what loading / export need to know about it."""

    graph: Graph
    family: Family
    word_embeddings: nn.Embedding
    tied: list[nn.Linear]  # decoders sharing the word-embedding table (when tied)


def build(config: HfConfig, task: str) -> Assembly:
    """The graph of ``config``'s family for ``task`` (``base``, ``seqcls``, ``tokcls``, ``qa``,
    ``mlm``). Parameters are created on the current default device (``meta`` for loading)."""
    if task not in TASKS:
        choices = format_choices(TASKS, sort=False)
        raise ConfigError(f"unknown task {task!r}; expected one of {choices}")
    family = family_of(config.model_type)
    if task != "base" and task not in family.heads:
        raise ConfigError(
            f"{family.arch} has no {task} head in transformers; {config.model_type} models "
            f"support: {format_choices(family.tasks, sort=False)}"
        )
    backbone, words = family.backbone(config, task)
    inputs = list(INPUTS)
    fb = FlowBuilder(backbone).input(inputs).using(inputs)
    tied = family.heads[task](fb, config, words) if task != "base" else []
    graph = fb.build()
    if config.tie_word_embeddings:
        for linear in tied:
            linear.weight = words.weight
    return Assembly(graph, family, words, tied if config.tie_word_embeddings else [])
