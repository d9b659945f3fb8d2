"""``AutoConfig`` and ``AutoModel*``: dispatch on ``config.json``'s ``model_type``.

Loading builds the graph on the ``meta`` device (no memory, no random init), maps the
memory-mapped checkpoint tensors onto it with :func:`~flodl_hf.plan_load` and assigns them as
the parameters (zero-copy, file dtype kept). Only parameters the checkpoint lacks as a whole
head are materialised and initialised.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
from torch import nn

from flodl_core import CheckpointError

from ._config import HfConfig
from ._hub import resolve_file, resolve_weights
from ._loader import WeightLoadReport, check_kinds, expected_keys, plan_load
from ._model import HfModel
from ._tasks import MaskedLM, QuestionAnswering, SequenceClassifier, TokenClassifier
from ._tokenizer import HfTokenizer, check_tokenizer
from ._weights import read_weights
from .models._assemble import build
from .models._layers import init_parameter, init_weights

PathLike = str | os.PathLike[str]

MODEL_CLASSES: dict[str, type[HfModel]] = {
    "base": HfModel,
    "seqcls": SequenceClassifier,
    "tokcls": TokenClassifier,
    "qa": QuestionAnswering,
    "mlm": MaskedLM,
}


class AutoConfig:
    """Reads any supported family's ``config.json`` into an :class:`HfConfig`."""

    @staticmethod
    def from_pretrained(
        repo_or_dir: PathLike, *, revision: str | None = None, cache_dir: PathLike | None = None
    ) -> HfConfig:
        path = resolve_file(repo_or_dir, "config.json", revision=revision, cache_dir=cache_dir)
        assert path is not None
        return HfConfig.from_file(path)

    @staticmethod
    def from_dict(data: dict[str, Any]) -> HfConfig:
        return HfConfig.from_dict(data)


@contextmanager
def _skeleton() -> Iterator[None]:
    """Build on the ``meta`` device without paying for random init.

    ``normal_`` on a meta tensor is the one init op torch runs through its Python reference
    kernels (about a second and 70 MB the first time in a process); it is skipped for meta
    tensors only, and restored on exit.
    """
    original = torch.nn.init.normal_

    def normal_(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return tensor if tensor.is_meta else original(tensor, *args, **kwargs)

    torch.nn.init.normal_ = normal_
    try:
        with torch.device("meta"):
            yield
    finally:
        torch.nn.init.normal_ = original


def _config_of(config: HfConfig | dict[str, Any] | PathLike) -> HfConfig:
    if isinstance(config, HfConfig):
        return config
    if isinstance(config, dict):
        return HfConfig.from_dict(config)
    return HfConfig.from_file(config)


class _AutoModel:
    """What every ``AutoModel*`` class shares; the subclass names the task."""

    task: ClassVar[str] = "base"

    @classmethod
    def from_config(
        cls,
        config: HfConfig | dict[str, Any] | PathLike,
        *,
        num_labels: int | None = None,
        id2label: dict[int, str] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        tokenizer: HfTokenizer | None = None,
    ) -> HfModel:
        """A freshly initialised model (transformers' init: normal(0, initializer_range))."""
        cfg = _config_of(config).with_labels(num_labels, id2label)
        with torch.device(device or "cpu"):
            assembly = build(cfg, cls.task)
        model = MODEL_CLASSES[cls.task](cfg, assembly, tokenizer)
        init_weights(model, cfg.initializer_range)
        model.tie_weights()
        if dtype is not None:
            model.to(dtype)
        return model

    @classmethod
    def from_pretrained(
        cls,
        repo_or_dir: PathLike,
        *,
        num_labels: int | None = None,
        id2label: dict[int, str] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        revision: str | None = None,
        cache_dir: PathLike | None = None,
        tokenizer: bool | HfTokenizer = True,
    ) -> HfModel:
        """Load a local folder or an owner-qualified Hub repo (``"owner/name"``).

        ``num_labels`` / ``id2label`` give a classification head its label set (a head absent
        from the checkpoint starts fresh). ``tokenizer=True`` attaches ``tokenizer.json`` when
        the folder has one. The model is returned in eval mode; ``model.load_report`` says what
        was loaded, left unused and initialised.
        """
        if not isinstance(tokenizer, bool):
            # A path or a raw tokenizers.Tokenizer would otherwise be dropped without a word.
            check_tokenizer(tokenizer, "True, False or an HfTokenizer")
        kw = {"revision": revision, "cache_dir": cache_dir}
        cfg_path = resolve_file(repo_or_dir, "config.json", **kw)
        assert cfg_path is not None
        cfg = HfConfig.from_file(cfg_path).with_labels(num_labels, id2label)
        weights = resolve_weights(repo_or_dir, **kw)
        state = read_weights(weights)
        with _skeleton():
            assembly = build(cfg, cls.task)
        model = MODEL_CLASSES[cls.task](cfg, assembly)
        mapped, report = plan_load(expected_keys(model), state, model.key_policy())
        if not report.ok:
            hint = ""
            if any(k.split(".")[0] != model.prefix for k, _, _ in report.mismatched):
                hint = (
                    "\nthe checkpoint's head was trained for another label set: omit "
                    "num_labels / id2label to use its own, or start from the base checkpoint "
                    "for a fresh head"
                )
            raise CheckpointError(f"cannot load {weights}:\n{report.summary()}{hint}")
        check_kinds(model, mapped, f" {weights}")
        with torch.no_grad():
            model.load_state_dict(mapped, strict=False, assign=True)
        model.tie_weights()
        _materialise(model, report, cfg.initializer_range)
        if dtype is not None or device is not None:
            model.to(device=device, dtype=dtype)
        if tokenizer is True:
            tok_path = resolve_file(repo_or_dir, "tokenizer.json", **kw, required=False)
            model.tokenizer = HfTokenizer.from_file(tok_path) if tok_path else None
        elif isinstance(tokenizer, HfTokenizer):
            model.tokenizer = tokenizer
        model.load_report = report
        return model.eval()


def _materialise(model: HfModel, report: WeightLoadReport, std: float) -> None:
    """Create and initialise the parameters the checkpoint did not provide (fresh heads)."""
    dtype = model.dtype
    for key in report.initialized:
        owner_name, _, name = key.rpartition(".")
        owner = model.get_submodule(owner_name)
        old = getattr(owner, name)
        fresh = torch.empty(old.shape, dtype=dtype)
        if isinstance(old, nn.Parameter):
            setattr(owner, name, nn.Parameter(fresh, requires_grad=old.requires_grad))
        else:
            owner.register_buffer(name, fresh)
        init_parameter(owner, name, std)
    model.tie_weights()
    left = [k for k, v in model.state_dict(keep_vars=True).items() if v.is_meta]
    if left:
        raise CheckpointError(f"internal: tensors left unmaterialised after loading: {left[:5]}")


class AutoModel(_AutoModel):
    """Backbone: ``model(input_ids, ...) -> EncoderOutput(last_hidden_state, pooler_output)``."""

    task = "base"


class AutoModelForSequenceClassification(_AutoModel):
    """Sequence classification: logits ``(B, C)``; ``predict(texts)``."""

    task = "seqcls"


class AutoModelForTokenClassification(_AutoModel):
    """Token classification (NER): logits ``(B, S, C)``; ``predict(texts)``."""

    task = "tokcls"


class AutoModelForQuestionAnswering(_AutoModel):
    """Extractive QA: ``SpanLogits(start, end)``; ``answer(question, context)``."""

    task = "qa"


class AutoModelForMaskedLM(_AutoModel):
    """Masked LM: logits ``(B, S, V)``; ``fill_mask(text, top_k)``."""

    task = "mlm"
