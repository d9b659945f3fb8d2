"""``SentenceEncoder``: sentence embeddings from a sentence-transformers folder, without
``sentence-transformers`` or ``transformers``.

A sentence-transformers model is a pipeline listed in ``modules.json``: the encoder (an HF model
folder, usually the root), then ``Pooling`` (``1_Pooling/config.json``: which of CLS / mean /
max / mean-sqrt-len pooling, concatenated when several) and optionally ``Normalize`` (unit L2
length). Each is read and applied here; any other module (``Dense`` ...) is refused by name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from flodl_core import ConfigError, check_int, format_choices

from ._auto import AutoModel
from ._hub import resolve_file
from ._model import HfModel
from ._tokenizer import HfTokenizer

PathLike = str | os.PathLike[str]

#: Pooling modes, in the order sentence-transformers concatenates them.
POOLING_MODES: tuple[str, ...] = ("cls", "max", "mean", "mean_sqrt_len")
_UNSUPPORTED_MODES = ("weightedmean", "lasttoken")
_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"


class PoolingRequiredError(ConfigError):
    """No pooling was given and the folder names none (no ``modules.json``, or one without a
    ``Pooling`` module).

    ``source`` names the folder or repo, ``reason`` says what it lacks and ``choices`` lists the
    pooling modes, so that each front end (this API's ``pooling=``, ``fdl hf embed --pooling``)
    can state the fix in its own terms.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source, self.reason, self.choices = source, reason, POOLING_MODES
        super().__init__(
            f"{source} {reason}: pass pooling='mean' (or 'cls', 'max', 'mean_sqrt_len') to "
            "choose one"
        )


@dataclass(frozen=True)
class Pooling:
    """Which poolings to apply (concatenated in :data:`POOLING_MODES` order)."""

    modes: tuple[str, ...]

    def __post_init__(self) -> None:
        bad = [m for m in self.modes if m not in POOLING_MODES]
        if bad or not self.modes:
            raise ConfigError(
                f"pooling mode {bad[0] if bad else '(none)'!r} is not supported; expected one or "
                f"more of {format_choices(POOLING_MODES)}"
            )

    @classmethod
    def from_config(cls, data: Any, where: str) -> Pooling:
        """Read ``1_Pooling/config.json`` (``pooling_mode_<mode>_tokens`` / ``_token`` flags)."""
        if not isinstance(data, dict):
            raise ConfigError(f"{where} must be a JSON object, got {type(data).__name__}")
        modes = []
        for key, on in data.items():
            if not key.startswith("pooling_mode_") or not on:
                continue
            mode = key.removeprefix("pooling_mode_").removesuffix("_tokens").removesuffix("_token")
            if mode in _UNSUPPORTED_MODES or mode not in POOLING_MODES:
                raise ConfigError(
                    f"{where}: pooling mode {mode!r} ({key}) is not supported; supported: "
                    f"{format_choices(POOLING_MODES)}"
                )
            modes.append(mode)
        if not modes:
            raise ConfigError(f"{where} switches no pooling mode on (pooling_mode_*_tokens)")
        return cls(tuple(m for m in POOLING_MODES if m in modes))

    def __call__(self, hidden: Tensor, mask: Tensor) -> Tensor:
        """``hidden: (B, S, H)``, ``mask: (B, S)`` 0/1 -> ``(B, H * len(modes))``."""
        m = mask.unsqueeze(-1).to(hidden.dtype)
        out = []
        for mode in self.modes:
            if mode == "cls":
                out.append(hidden[:, 0])
            elif mode == "max":
                # Padding set far below any activation, as sentence-transformers does.
                out.append(hidden.masked_fill(m == 0, -1e9).max(dim=1).values)
            else:
                total = (hidden * m).sum(dim=1)
                count = m.sum(dim=1).clamp(min=1e-9)
                out.append(total / (count if mode == "mean" else count.sqrt()))
        return out[0] if len(out) == 1 else torch.cat(out, dim=-1)


class SentenceEncoder:
    """An encoder model, its tokenizer, a pooling and optional normalisation.

    ``encode(texts)`` returns one ``(N, D)`` row per text, in the order given.
    """

    def __init__(
        self,
        model: HfModel,
        tokenizer: HfTokenizer,
        pooling: Pooling,
        normalize: bool = False,
        max_seq_length: int | None = None,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.pooling = pooling
        self.normalize = normalize
        self.max_seq_length = max_seq_length

    @property
    def dimension(self) -> int:
        """``D``, the width of an embedding."""
        return self.model.config.hidden_size * len(self.pooling.modes)

    @classmethod
    def from_pretrained(
        cls,
        repo_or_dir: PathLike,
        *,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        revision: str | None = None,
        cache_dir: PathLike | None = None,
    ) -> SentenceEncoder:
        """Read a sentence-transformers folder (or Hub repo).

        A plain HF model folder (no ``modules.json``) needs ``pooling=`` (``"mean"``, ``"cls"``,
        ``"max"``, ``"mean_sqrt_len"`` or a list of them); ``pooling`` / ``normalize`` given
        here override the folder's choice.
        """
        kw: dict[str, Any] = {"revision": revision, "cache_dir": cache_dir}
        modules_file = resolve_file(repo_or_dir, "modules.json", required=False, **kw)
        subdir, pool, norm = "", None, False
        if modules_file is not None:
            subdir, pool, norm = _read_modules(repo_or_dir, modules_file, kw)
        if pooling is not None:
            pool = Pooling((pooling,) if isinstance(pooling, str) else tuple(pooling))
        if pool is None:
            reason = (
                "has no modules.json (not a sentence-transformers folder)"
                if modules_file is None
                else f"has a modules.json without a {_POOLING} module"
            )
            raise PoolingRequiredError(os.fspath(repo_or_dir), reason)
        if normalize is not None:
            norm = normalize
        source: PathLike = repo_or_dir
        if subdir:
            source = Path(repo_or_dir) / subdir if _is_dir(repo_or_dir) else repo_or_dir
        model = AutoModel.from_pretrained(source, device=device, dtype=dtype, **kw)
        if model.tokenizer is None:
            raise ConfigError(f"{os.fspath(source)} has no tokenizer.json; the encoder needs one")
        max_len = _max_seq_length(source, kw, model)
        return cls(model, model.tokenizer, pool, norm, max_len)

    @torch.inference_mode()
    def encode(self, texts: str | Sequence[str], batch_size: int = 32) -> Tensor:
        """``texts`` -> ``(N, D)`` embeddings on the model's device (one text -> ``(1, D)``).

        Texts are tokenised once, sorted by token count and run ``batch_size`` at a time, so that
        each batch pads only to its own longest text; rows come back in the order given.
        """
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, Sequence):
            raise ConfigError(f"texts must be a list of strings, got {type(texts).__name__}")
        batch_size = check_int(batch_size, "batch_size", ge=1, expected="a positive integer")
        ids = self.tokenizer.encode_ids(texts, max_length=self.max_seq_length)
        device, model = self.model.device, self.model
        out = torch.empty(len(ids), self.dimension, dtype=model.dtype, device=device)
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        pad = self.tokenizer.pad_token_id
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = len(ids[rows[0]])
            batch = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for r, i in enumerate(rows):
                batch[r, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                mask[r, : len(ids[i])] = 1
            batch, mask = batch.to(device), mask.to(device)
            hidden = model(batch, mask).last_hidden_state
            pooled = self.pooling(hidden, mask)
            if self.normalize:
                pooled = F.normalize(pooled, p=2, dim=-1)
            out[torch.tensor(rows, device=device)] = pooled
        return out

    def __repr__(self) -> str:
        return (
            f"SentenceEncoder({self.model.architecture}, pooling={'+'.join(self.pooling.modes)}, "
            f"normalize={self.normalize}, dim={self.dimension})"
        )


def _is_dir(path: PathLike) -> bool:
    return Path(os.fspath(path)).expanduser().is_dir()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}") from None


def _read_modules(
    repo_or_dir: PathLike, modules_file: Path, kw: dict[str, Any]
) -> tuple[str, Pooling | None, bool]:
    """``(encoder sub-folder, pooling, normalize)`` from ``modules.json``."""
    modules = _read_json(modules_file)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ConfigError(f"{modules_file} must be a JSON list of module objects")
    subdir, pool, norm, seen = "", None, False, False
    for entry in sorted(modules, key=lambda m: int(m.get("idx", 0))):
        kind, path = entry.get("type"), str(entry.get("path", "")).strip("/")
        if kind == _TRANSFORMER:
            subdir, seen = path, True
        elif kind == _POOLING:
            name = f"{path}/config.json" if path else "config.json"
            cfg = resolve_file(repo_or_dir, name, **kw)
            assert cfg is not None
            pool = Pooling.from_config(_read_json(cfg), str(cfg))
        elif kind == _NORMALIZE:
            norm = True
        else:
            raise ConfigError(
                f"{modules_file}: module {entry.get('name', '?')!r} of type {kind!r} is not "
                f"supported; supported: {_TRANSFORMER}, {_POOLING}, {_NORMALIZE}"
            )
    if not seen:
        raise ConfigError(f"{modules_file} lists no {_TRANSFORMER} module")
    return subdir, pool, norm


def _max_seq_length(source: PathLike, kw: dict[str, Any], model: HfModel) -> int | None:
    """``sentence_bert_config.json``'s ``max_seq_length`` (longer texts are truncated, as
    sentence-transformers does), capped by the model's positions; None when unbounded."""
    path = resolve_file(source, "sentence_bert_config.json", required=False, **kw)
    limit = None
    if path is not None:
        value = _read_json(path).get("max_seq_length")
        if value is not None:
            limit = check_int(
                value, "max_seq_length", ge=1, where=str(path), expected="a positive integer"
            )
    cfg = model.config
    if model.family.positions != "rotary":
        cap = cfg.max_position_embeddings
        if model.family.positions == "padding_offset":
            cap -= model.family.pad_for_positions(cfg) + 1
        limit = cap if limit is None else min(limit, cap)
    return limit
