"""One normalised configuration for every supported encoder family, read from HF ``config.json``.

HF spells the same idea differently per family (DistilBERT's ``dim`` / ``n_layers`` / ``activation``
are BERT's ``hidden_size`` / ``num_hidden_layers`` / ``hidden_act``). :class:`HfConfig` holds the
normalised values the modules need, plus the original dictionary so that :meth:`HfConfig.to_dict`
writes back a ``config.json`` that ``transformers`` reads as the same model. What differs per
family (defaults, renamed keys, extra checks) is read from the family's declaration
(:class:`~flodl_hf.models.Family`); settings only one family uses stay in :attr:`HfConfig.raw`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flodl_core import ConfigError, atomic_write, check_int, format_choices

if TYPE_CHECKING:
    from .models._family import Family


@dataclass
class HfConfig:
    """Normalised hyper-parameters of a BERT-family encoder (see module docstring).

    Field defaults are BERT-base's; per-family defaults are applied by :meth:`from_dict`.
    """

    model_type: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    initializer_range: float = 0.02
    tie_word_embeddings: bool = True
    # Head dropouts (None: fall back to hidden_dropout_prob, as transformers does).
    classifier_dropout: float | None = None
    # ALBERT: factorised embeddings and shared layer groups. DeBERTa: optional embed_proj.
    embedding_size: int | None = None
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    # DistilBERT head dropouts.
    seq_classif_dropout: float = 0.2
    qa_dropout: float = 0.1
    # MPNet: relative-position buckets (the table's rows).
    relative_attention_num_buckets: int = 32
    # DeBERTa-v2 / v3.
    relative_attention: bool = False
    max_relative_positions: int = -1
    position_buckets: int = -1
    pos_att_type: tuple[str, ...] = ()
    share_att_key: bool = False
    norm_rel_ebd: str = "none"
    position_biased_input: bool = True
    conv_kernel_size: int = 0
    conv_groups: int = 1
    conv_act: str = "tanh"
    pooler_hidden_size: int | None = None
    pooler_hidden_act: str = "gelu"
    pooler_dropout: float = 0.0
    legacy: bool = True
    # Task heads.
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    problem_type: str | None = None
    # The config.json this came from (written back, updated, by to_dict).
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    # ---- derived values ---------------------------------------------------------------------
    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def labels(self) -> list[str]:
        """Label names in index order."""
        return [self.id2label[i] for i in range(self.num_labels)]

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def embedding_dim(self) -> int:
        """Width of the embedding tables (ALBERT / DeBERTa may differ from ``hidden_size``)."""
        return self.embedding_size if self.embedding_size is not None else self.hidden_size

    @property
    def family(self) -> Family:
        """The declaration of this config's family (see :class:`~flodl_hf.models.Family`)."""
        from .models._registry import family_of  # local: the models import this module

        return family_of(self.model_type)

    @property
    def head_dropout(self) -> float:
        """Dropout before a classification head, read the way each family reads it."""
        return self.family.head_dropout(self)

    @property
    def rel_span(self) -> int:
        """DeBERTa: half the number of rows of the relative-position table."""
        return self.position_buckets if self.position_buckets > 0 else self.max_relative

    @property
    def max_relative(self) -> int:
        """DeBERTa: the largest relative distance the log buckets cover."""
        if self.max_relative_positions >= 1:
            return self.max_relative_positions
        return self.max_position_embeddings

    # ---- checks -----------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise :class:`ConfigError` naming the first inconsistent field."""
        family = self.family
        for name in (
            "vocab_size",
            "hidden_size",
            "num_hidden_layers",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "num_hidden_groups",
            "inner_group_num",
        ):
            check_int(getattr(self, name), f"config {name}", ge=1, expected="a positive integer")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"config hidden_size {self.hidden_size} must be a multiple of "
                f"num_attention_heads {self.num_attention_heads}"
            )
        check_int(self.type_vocab_size, "config type_vocab_size", ge=0)
        check_int(self.pad_token_id, "config pad_token_id", expected="an integer token id")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise ConfigError(
                f"config pad_token_id {self.pad_token_id} must lie in [0, vocab_size="
                f"{self.vocab_size})"
            )
        if sorted(self.id2label) != list(range(self.num_labels)) or self.num_labels < 1:
            raise ConfigError(
                "config id2label must map 0..n-1 to names with n >= 1, got keys "
                f"{sorted(self.id2label)}"
            )
        from .models._layers import check_activation  # local: models import this module

        check_activation(self.hidden_act, "hidden_act")
        check_activation(self.pooler_hidden_act, "pooler_hidden_act")
        check_activation(self.conv_act, "conv_act")
        family.check(self)

    # ---- conversions ------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HfConfig:
        """Read a ``config.json`` dictionary (any supported family)."""
        from .models._registry import FAMILIES, family_of

        if not isinstance(data, dict):
            raise ConfigError(f"config must be a JSON object, got {type(data).__name__}")
        model_type = data.get("model_type")
        if not isinstance(model_type, str):
            raise ConfigError(
                f"config.json has no string 'model_type' (got {model_type!r}); supported model "
                f"types: {format_choices(FAMILIES)}"
            )
        family = family_of(model_type)
        values: dict[str, Any] = dict(family.config_defaults)
        for key, value in data.items():
            values[family.key_renames.get(key, key)] = value
        values.update(family.fixed)
        known = {f.name for f in fields(cls)} - {"raw", "id2label"}
        kwargs = {k: v for k, v in values.items() if k in known}
        if kwargs.get("pad_token_id") is None:
            kwargs["pad_token_id"] = 0
        att = kwargs.get("pos_att_type")
        if isinstance(att, str):
            att = [x.strip() for x in att.lower().split("|") if x.strip()]
        kwargs["pos_att_type"] = tuple(att or ())
        if isinstance(kwargs.get("norm_rel_ebd"), str):
            kwargs["norm_rel_ebd"] = kwargs["norm_rel_ebd"].lower()
        kwargs["id2label"] = _read_id2label(values)
        return cls(**kwargs, raw=dict(data))

    @classmethod
    def from_file(cls, path: str | Path) -> HfConfig:
        """Read ``config.json`` (or the folder that holds it)."""
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"no config.json at {path}") from None
        except ValueError as e:  # JSONDecodeError, or UnicodeDecodeError for a binary file
            raise ConfigError(f"{path} is not valid JSON: {e}") from None
        return cls.from_dict(data)

    def with_labels(
        self, num_labels: int | None = None, id2label: dict[int, str] | None = None
    ) -> HfConfig:
        """A copy with a new label set (``LABEL_k`` names when only a count is given)."""
        if id2label is None:
            if num_labels is None:
                return replace(self, raw=dict(self.raw))
            num_labels = check_int(num_labels, "num_labels", ge=1, expected="a positive integer")
            id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
        elif not isinstance(id2label, Mapping):
            raise ConfigError(
                f"id2label must be a dict of index -> name (e.g. {{0: 'negative', 1: 'positive'}}),"
                f" got {type(id2label).__name__} {id2label!r}"
            )
        elif num_labels is not None and num_labels != len(id2label):
            raise ConfigError(
                f"num_labels={num_labels} disagrees with id2label, which has {len(id2label)} names"
            )
        try:
            labels = {int(k): str(v) for k, v in id2label.items()}
        except (TypeError, ValueError):
            raise ConfigError(
                f"id2label keys must be integer indices 0..n-1, got {list(id2label)!r}"
            ) from None
        return replace(self, id2label=labels, raw=dict(self.raw))

    def to_dict(self, architectures: list[str] | None = None) -> dict[str, Any]:
        """The ``config.json`` dictionary transformers reads back as this model."""
        family = self.family
        out = dict(self.raw)
        inverse = {v: k for k, v in family.key_renames.items()}
        skip = {"raw", "id2label", "embedding_size", "pooler_hidden_size", *family.unwritten}
        for f in fields(self):
            if f.name in skip:
                continue
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = list(value)
            out[inverse.get(f.name, f.name)] = value
        if self.embedding_size is not None:
            out["embedding_size"] = self.embedding_size
        if self.pooler_hidden_size is not None:
            out["pooler_hidden_size"] = self.pooler_hidden_size
        out["id2label"] = {str(i): name for i, name in self.id2label.items()}
        out["label2id"] = {name: i for i, name in self.id2label.items()}
        if architectures is not None:
            out["architectures"] = architectures
        return out

    def save(self, path: str | Path, architectures: list[str] | None = None) -> None:
        """Write ``config.json`` atomically."""
        text = json.dumps(self.to_dict(architectures), indent=2, sort_keys=True) + "\n"
        atomic_write(path, text, parents=True)


def _read_id2label(values: dict[str, Any]) -> dict[int, str]:
    raw = values.get("id2label")
    if raw:
        try:
            return {int(k): str(v) for k, v in raw.items()}
        except (AttributeError, ValueError):
            raise ConfigError(
                f"config id2label must map integer indices to names, got {raw!r}"
            ) from None
    n = values.get("num_labels", 2)
    n = check_int(n, "config num_labels", ge=1, expected="a positive integer")
    return {i: f"LABEL_{i}" for i in range(n)}
