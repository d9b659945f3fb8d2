"""``HfModel``: a family graph with HF's calling convention, its config and tokenizer.

The graph's top-level children are registered on the model too, so ``model.state_dict()`` keys
are HF checkpoint keys (``bert.encoder.layer.0.attention.self.query.weight``) and optimizers,
``.to()``, ``torch.compile`` and ``state_dict()`` work on the model as on any module. The
graph's namespaces are the model's: ``model.tree`` (``freeze``, ``parameters_at`` ... by dotted
path), ``model.viz``, ``model.metrics``, ``model.timings``; the tree's flat names
(``model.freeze(...)``) are kept as aliases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, ShapeError
from flodl_graph import Graph, GraphTree, GraphViz, Metrics

from ._config import HfConfig
from ._loader import KeyPolicy
from ._tokenizer import EncodedBatch, HfTokenizer, check_tokenizer
from .models._assemble import Assembly
from .models._bert import roberta_position_ids
from .models._family import Family
from .models._layers import additive_mask


class EncoderOutput(NamedTuple):
    """Base-model output: ``last_hidden_state: (B, S, H)``; ``pooler_output: (B, H)`` for the
    families with a pooler (BERT, RoBERTa, XLM-R, ALBERT, MPNet), else None."""

    last_hidden_state: Tensor
    pooler_output: Tensor | None


class SpanLogits(NamedTuple):
    """Question-answering output: ``start_logits, end_logits: (B, S)``."""

    start_logits: Tensor
    end_logits: Tensor


class HfModel(nn.Module):
    """One supported family for one task (see :mod:`flodl_hf`'s ``AutoModel*``)."""

    task = "base"

    def __init__(
        self, config: HfConfig, assembly: Assembly, tokenizer: HfTokenizer | None = None
    ) -> None:
        super().__init__()
        check_tokenizer(tokenizer)
        self.config = config
        self.__dict__["_assembly"] = assembly
        self.tokenizer = tokenizer
        for name, child in assembly.graph.named_children():
            self.add_module(name, child)

    # ---- structure --------------------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        """The flodl graph (tree paths, observation, ``code``, visualization)."""
        return self.__dict__["_assembly"].graph

    @property
    def family(self) -> Family:
        """The family declaration this model was built from."""
        return self.__dict__["_assembly"].family

    @property
    def prefix(self) -> str:
        """The backbone's label and HF ``base_model_prefix`` (``bert``, ``roberta`` ...)."""
        return self.__dict__["_assembly"].family.prefix

    @property
    def architecture(self) -> str:
        """transformers' class name for this family and task (``BertForMaskedLM`` ...)."""
        return self.__dict__["_assembly"].family.architecture(self.task)

    @property
    def labels(self) -> list[str]:
        return self.config.labels

    @property
    def dtype(self) -> torch.dtype:
        return self.__dict__["_assembly"].word_embeddings.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.__dict__["_assembly"].word_embeddings.weight.device

    # ---- the graph's namespaces, and the tree's flat names -----------------------------------
    @property
    def tree(self) -> GraphTree:
        """The graph's tree: paths, freeze/thaw, checkpoints (``model.tree.freeze("bert")``)."""
        return self.__dict__["_assembly"].graph.tree

    @property
    def viz(self) -> GraphViz:
        """The graph's diagrams and profiling (``model.viz.svg()``)."""
        return self.__dict__["_assembly"].graph.viz

    @property
    def metrics(self) -> Metrics:
        """The graph's observed metrics (``model.metrics.record("loss", v)``)."""
        return self.__dict__["_assembly"].graph.metrics

    @property
    def timings(self) -> Metrics:
        """The graph's per-node timings (with ``model.viz.enable_profiling()``)."""
        return self.__dict__["_assembly"].graph.timings

    # Graph's aliases read ``self.tree``, which the property above provides.
    freeze = Graph.freeze
    thaw = Graph.thaw
    is_frozen = Graph.is_frozen
    parameters_at = Graph.parameters_at
    named_parameters_at = Graph.named_parameters_at
    named_buffers_at = Graph.named_buffers_at
    set_training_at = Graph.set_training_at
    subgraph = Graph.subgraph
    validate_path = Graph.validate_path
    tree_summary = Graph.tree_summary
    param_summary = Graph.param_summary
    save_checkpoint = Graph.save_checkpoint
    load_checkpoint = Graph.load_checkpoint
    load_subgraph_checkpoint = Graph.load_subgraph_checkpoint
    tagged_at = Graph.tagged_at

    def train(self, mode: bool = True) -> HfModel:
        super().train(mode)
        self.graph.train(mode)
        return self

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> HfModel:  # type: ignore[override]
        super()._apply(fn, recurse)
        self.graph._apply(fn, recurse=False)  # the graph's own carried state, not the children
        return self

    def with_tokenizer(self, tokenizer: HfTokenizer) -> HfModel:
        """Attach the tokenizer the text APIs use; returns the model."""
        check_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        return self

    def tie_weights(self) -> None:
        """Share the word-embedding table with the MLM decoder (when the config ties them)."""
        asm = self.__dict__["_assembly"]
        for linear in asm.tied:
            linear.weight = asm.word_embeddings.weight

    def tied_keys(self) -> list[str]:
        """State-dict keys that alias the word-embedding table (not stored in checkpoints)."""
        asm = self.__dict__["_assembly"]
        ids = {id(linear) for linear in asm.tied}
        return [
            f"{name}.weight" if name else "weight"
            for name, m in self.named_modules(remove_duplicate=False)
            if id(m) in ids
        ]

    def key_policy(self) -> KeyPolicy:
        """How checkpoint keys map onto this model (see :class:`~flodl_hf.KeyPolicy`)."""
        fam = self.family
        heads = tuple(f"{n}." for n, _ in self.named_children() if n != fam.prefix)
        # Old position-id buffers, DeBERTa's unused pre-training head, and what the family
        # declares (tied copies some checkpoints still store ...).
        ignore = [r"(^|\.)position_ids$", r"^mask_predictions\.", *fam.ignore_keys(self.config)]
        return KeyPolicy(
            prefix=fam.prefix,
            roots=fam.roots,
            optional=(*heads, f"{fam.prefix}.pooler."),
            ignore=tuple(ignore),
            tied=tuple(self.tied_keys()),
        )

    def hf_state_dict(self) -> dict[str, Tensor]:
        """The state dict transformers expects in ``model.safetensors`` for this architecture:
        tied aliases dropped, and no backbone prefix on base models."""
        tied = set(self.tied_keys())
        out = {k: v for k, v in self.state_dict().items() if k not in tied}
        if self.task == "base":
            cut = len(self.prefix) + 1
            out = {k[cut:]: v for k, v in out.items()}
        return out

    # ---- running ----------------------------------------------------------------------------
    def graph_inputs(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> dict[str, Tensor]:
        """The graph's auxiliary inputs, defaults filled as transformers fills them.

        ``attention_mask`` becomes additive ``(B, 1, 1, S)`` for the SDPA families and stays
        ``(B, S)`` 0/1 for the ``"binary"`` ones (DeBERTa, whose embeddings and pair mask read it).
        """
        if not isinstance(input_ids, Tensor) or input_ids.dim() != 2:
            shape = tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids)
            raise ShapeError(f"input_ids must be a (batch, seq) tensor, got {shape}")
        if input_ids.dtype.is_floating_point:
            raise ShapeError(f"input_ids must hold integer token ids, got {input_ids.dtype}")
        for name, t in (
            ("attention_mask", attention_mask),
            ("token_type_ids", token_type_ids),
            ("position_ids", position_ids),
        ):
            if t is not None and not isinstance(t, Tensor):
                raise ShapeError(f"{name} must be a tensor like input_ids, got {type(t).__name__}")
            if t is not None and tuple(t.shape) != tuple(input_ids.shape):
                raise ShapeError(
                    f"{name} must have the shape of input_ids {tuple(input_ids.shape)}, "
                    f"got {tuple(t.shape)}"
                )
        cfg, fam = self.config, self.family
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            b, s = input_ids.shape
            # Checked from the length alone (no device sync): the largest default position.
            top = s - 1
            if fam.positions == "padding_offset":
                pad = fam.pad_for_positions(cfg)
                position_ids = roberta_position_ids(input_ids, pad)
                top = s + pad
            else:
                position_ids = torch.arange(s, device=input_ids.device).expand(b, s)
            bounded = fam.positions != "rotary" and fam.positions_used(cfg)
            if bounded and top >= cfg.max_position_embeddings:
                raise ShapeError(
                    f"sequence too long: {s} tokens need position {top}, the model has "
                    f"{cfg.max_position_embeddings} positions; truncate the input "
                    "(tokenizer.encode(..., max_length=...))"
                )
        if fam.attention_mask == "binary":
            mask = attention_mask
        else:
            mask = additive_mask(attention_mask, self.dtype)
        return {
            "attention_mask": mask,
            "position_ids": position_ids,
            "token_type_ids": token_type_ids,
        }

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        position_ids: Tensor | None = None,
    ) -> Any:
        """``input_ids: (B, S)`` -> the task's output (see the subclass)."""
        inputs = self.graph_inputs(input_ids, attention_mask, token_type_ids, position_ids)
        return self._output(self.graph(input_ids, **inputs))

    def _output(self, out: Tensor) -> Any:
        pooled = None
        if "pooler" in self.graph.child_graph(self.prefix).tag_names:
            pooled = self.graph.tagged_at(f"{self.prefix}.pooler")
        return EncoderOutput(out, pooled)

    def forward_encoded(self, encoded: EncodedBatch) -> Any:
        """Run on a tokenizer batch (moved to the model's device); the mode is left as is."""
        if not isinstance(encoded, EncodedBatch):
            raise ConfigError(
                f"expected an EncodedBatch from model.tokenizer.encode(texts), got "
                f"{type(encoded).__name__}; tokenise the texts first"
            )
        enc = encoded.to(self.device)
        return self(enc.input_ids, enc.attention_mask, enc.token_type_ids)

    def compute_loss(self, encoded: EncodedBatch, labels: Any) -> Tensor:
        """The training loss for ``labels``, as transformers' ``model(..., labels=...)``."""
        raise ConfigError(
            f"{type(self).__name__} has no task head: compute_loss needs a task model "
            "(AutoModelForSequenceClassification, ...ForTokenClassification, "
            "...ForQuestionAnswering or ...ForMaskedLM)"
        )

    def _require_tokenizer(self) -> HfTokenizer:
        if self.tokenizer is None:
            raise ConfigError(
                "this model has no tokenizer: load one with HfTokenizer.from_pretrained / "
                "from_file and attach it with model.with_tokenizer(tok)"
            )
        return self.tokenizer
