"""``HfTokenizer``: HF ``tokenizers`` (``tokenizer.json``) to padded ``(B, S)`` int64 batches."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import torch
from tokenizers import Encoding, Tokenizer
from torch import Tensor

from flodl_core import ConfigError, DataError, atomic_write, check_int

_PAD_CANDIDATES = ("[PAD]", "<pad>")
_MASK_CANDIDATES = ("[MASK]", "<mask>")


@dataclass
class EncodedBatch:
    """A tokenised, padded batch. Every tensor is int64 ``(B, S)``.

    ``sequence_ids`` is 0 for tokens of the first text, 1 for the second (pairs), -1 for special
    tokens and padding. ``tokens`` and ``offsets`` (character spans in the source text) are per
    row, padding included.
    """

    input_ids: Tensor
    attention_mask: Tensor
    token_type_ids: Tensor
    sequence_ids: Tensor
    tokens: list[list[str]]
    offsets: list[list[tuple[int, int]]]

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: torch.device | str) -> EncodedBatch:
        """The same batch with its tensors on ``device``."""
        moved = {
            f.name: getattr(self, f.name).to(device)
            if isinstance(getattr(self, f.name), Tensor)
            else getattr(self, f.name)
            for f in fields(self)
        }
        return EncodedBatch(**moved)


class HfTokenizer:
    """A ``tokenizers.Tokenizer`` that returns :class:`EncodedBatch` es.

    Padding is to the longest row, with the file's pad token (or ``[PAD]`` / ``<pad>``).
    Nothing is truncated unless asked (``max_length=``): too long an input is then an error
    at the model, not a silent cut.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        if not isinstance(tokenizer, Tokenizer):
            raise ConfigError(
                f"HfTokenizer wraps a tokenizers.Tokenizer, got {type(tokenizer).__name__} "
                f"{tokenizer!r}; to read a tokenizer.json use HfTokenizer.from_file(path)"
            )
        # A private copy: padding / truncation switches are per-call and must not leak.
        self._tok = Tokenizer.from_str(tokenizer.to_str())
        self._tok.no_padding()
        self._tok.no_truncation()
        self._lock = threading.Lock()
        self.pad_token, self.pad_token_id = self._find_pad(tokenizer)

    # ---- construction -----------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HfTokenizer:
        """Read a ``tokenizer.json`` (or the folder holding one)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(f"no tokenizer file at {path}")
        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as e:  # tokenizers raises plain Exception on malformed files
            raise DataError(f"{path} is not a valid tokenizer.json: {e}") from None

    @classmethod
    def from_pretrained(
        cls,
        repo_or_dir: str | os.PathLike[str],
        *,
        revision: str | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> HfTokenizer:
        """``tokenizer.json`` from a local folder or an owner-qualified Hub repo."""
        from ._hub import resolve_file

        path = resolve_file(repo_or_dir, "tokenizer.json", revision=revision, cache_dir=cache_dir)
        assert path is not None
        return cls.from_file(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``tokenizer.json`` (readable by HF ``tokenizers`` / ``transformers``)."""
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        text = self._tok.to_str()
        atomic_write(path, text, parents=True)

    # ---- vocabulary -------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def id_to_token(self, index: int) -> str | None:
        return self._tok.id_to_token(index)

    @property
    def mask_token(self) -> str:
        """``[MASK]`` (BERT, DistilBERT, ALBERT) or ``<mask>`` (RoBERTa, XLM-R, DeBERTa)."""
        for cand in _MASK_CANDIDATES:
            if self._tok.token_to_id(cand) is not None:
                return cand
        raise ConfigError("this tokenizer has no mask token ([MASK] or <mask>)")

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # ---- encoding ---------------------------------------------------------------------------
    def encode(self, texts: str | Sequence[str], *, max_length: int | None = None) -> EncodedBatch:
        """Tokenise single texts. ``max_length`` truncates each row to that many tokens."""
        texts = _text_list(texts)
        if not texts:
            raise ConfigError("texts is empty; expected a non-empty list of strings")
        return self._batch(texts, max_length)

    def encode_ids(self, texts: Sequence[str], *, max_length: int | None = None) -> list[list[int]]:
        """Token ids of each text, special tokens included, unpadded (for callers that batch
        and pad themselves, e.g. by length). ``max_length`` truncates each row."""
        texts = _text_list(texts)
        if max_length is not None:
            max_length = check_int(max_length, "max_length", ge=1, expected="a positive integer")
        if not texts:
            return []
        with self._lock:
            if max_length is not None:
                self._tok.enable_truncation(max_length)
            try:
                return [e.ids for e in self._tok.encode_batch(texts)]
            finally:
                self._tok.no_truncation()

    def encode_pairs(
        self, pairs: Sequence[tuple[str, str]], *, max_length: int | None = None
    ) -> EncodedBatch:
        """Tokenise ``(first, second)`` pairs (question/context, premise/hypothesis)."""
        pairs = list(pairs)
        if not pairs or not all(
            isinstance(p, tuple | list) and len(p) == 2 and all(isinstance(s, str) for s in p)
            for p in pairs
        ):
            raise ConfigError("encode_pairs expects a non-empty list of (str, str) pairs")
        return self._batch([tuple(p) for p in pairs], max_length)

    def _batch(self, inputs: list, max_length: int | None) -> EncodedBatch:
        if max_length is not None:
            max_length = check_int(max_length, "max_length", ge=1, expected="a positive integer")
        with self._lock:
            if max_length is not None:
                self._tok.enable_truncation(max_length)
            try:
                encs: list[Encoding] = self._tok.encode_batch(inputs)
            finally:
                self._tok.no_truncation()
        return self._pad(encs)

    def _pad(self, encs: list[Encoding]) -> EncodedBatch:
        n = max(len(e.ids) for e in encs)
        b = len(encs)
        ids = torch.full((b, n), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((b, n), dtype=torch.long)
        types = torch.zeros((b, n), dtype=torch.long)
        seqs = torch.full((b, n), -1, dtype=torch.long)
        tokens: list[list[str]] = []
        offsets: list[list[tuple[int, int]]] = []
        for i, e in enumerate(encs):
            k = len(e.ids)
            ids[i, :k] = torch.tensor(e.ids, dtype=torch.long)
            mask[i, :k] = torch.tensor(e.attention_mask, dtype=torch.long)
            types[i, :k] = torch.tensor(e.type_ids, dtype=torch.long)
            seqs[i, :k] = torch.tensor([-1 if s is None else s for s in e.sequence_ids])
            tokens.append(list(e.tokens) + [self.pad_token] * (n - k))
            offsets.append([tuple(o) for o in e.offsets] + [(0, 0)] * (n - k))
        return EncodedBatch(ids, mask, types, seqs, tokens, offsets)

    @staticmethod
    def _find_pad(tok: Tokenizer) -> tuple[str, int]:
        padding = tok.padding
        if padding and padding.get("pad_token") is not None:
            return str(padding["pad_token"]), int(padding["pad_id"])
        for cand in _PAD_CANDIDATES:
            index = tok.token_to_id(cand)
            if index is not None:
                return cand, index
        raise ConfigError(
            "the tokenizer has no padding configured and no [PAD] or <pad> token; "
            "add one or configure padding in tokenizer.json"
        )


def _text_list(texts: str | Sequence[str]) -> list[str]:
    """``texts`` as a list of strings (one string is one text, not a list of characters)."""
    if isinstance(texts, str):
        return [texts]
    if isinstance(texts, bytes) or not isinstance(texts, Iterable):
        raise ConfigError(
            f"texts must be a string or a non-empty list of strings, got "
            f"{type(texts).__name__} {texts!r}"
        )
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise ConfigError(
                f"texts must be strings, got a {type(t).__name__} at texts[{i}]: {t!r}; "
                "expected a non-empty list of strings"
            )
    return out


def check_tokenizer(tokenizer: object, expected: str = "an HfTokenizer or None") -> None:
    """Refuse anything but an :class:`HfTokenizer` (or None) for the ``tokenizer`` argument."""
    if tokenizer is None or isinstance(tokenizer, HfTokenizer):
        return
    hint = (
        "wrap it: HfTokenizer(tok)"
        if isinstance(tokenizer, Tokenizer)
        else "read one with HfTokenizer.from_file(path) or HfTokenizer.from_pretrained(name)"
    )
    raise ConfigError(
        f"tokenizer must be {expected}, got {type(tokenizer).__name__}"
        f"{f' {tokenizer!r}' if isinstance(tokenizer, str) else ''}; {hint}"
    )
