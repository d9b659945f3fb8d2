"""Character-level text (tiny-shakespeare): non-overlapping windows and next-character targets."""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..._checks import check_finite, check_int
from ..._errors import DataError, ShapeError
from .._dataset import TensorDataSet
from ._source import read_source


class Shakespeare(TensorDataSet):
    """Fields ``input: (N, L)`` and ``target: (N, L)`` int64 character ids; ``target`` is
    ``input`` shifted by one character (also reachable as the ``data`` / ``targets`` tensors).

    A :class:`DataLoader` names the fields by default (``batch["input"]``, ``batch["target"]``);
    ``x, y = ds[i]`` reads one window.

    The vocabulary is the text's sorted unique characters (65 for tiny-shakespeare). Windows do
    not overlap: ``N = (len(text) - 1) // L``; window ``i`` is ``text[i*L : i*L + L]``.
    """

    FILE = "tinyshakespeare.txt"
    field_names = ("input", "target")

    def __init__(self, data: Tensor, targets: Tensor, vocab: str) -> None:
        if data.dim() != 2 or data.shape != targets.shape:
            raise ShapeError(
                f"data and targets must both be (N, L), got {tuple(data.shape)} and "
                f"{tuple(targets.shape)}"
            )
        super().__init__(data, targets)
        self.idx_to_char: str = vocab
        self.char_to_idx: dict[str, int] = {c: i for i, c in enumerate(vocab)}

    @property
    def data(self) -> Tensor:
        return self.tensors[0]

    @property
    def targets(self) -> Tensor:
        return self.tensors[1]

    @property
    def vocab_size(self) -> int:
        return len(self.idx_to_char)

    @property
    def seq_len(self) -> int:
        return int(self.data.shape[1])

    @classmethod
    def parse(cls, text: str | bytes | os.PathLike[str], seq_len: int) -> Shakespeare:
        """Windows of ``seq_len`` characters over ``text``.

        ``text``: the text itself (``str``), its UTF-8 bytes, or a ``pathlib.Path`` to the file
        (``.gz`` or plain). A ``str`` is always the text: wrap a file name in ``Path(...)``.
        """
        seq_len = check_int(seq_len, "seq_len", ge=1)
        if isinstance(text, os.PathLike):
            text = read_source(text, "Shakespeare text")
            if text[:2] == b"\x1f\x8b":
                try:
                    text = gzip.decompress(text)
                except (OSError, EOFError, zlib.error) as e:
                    raise DataError(f"Shakespeare text: not a valid gzip stream ({e})") from e
        elif not isinstance(text, (str, bytes, bytearray)):
            raise DataError(
                f"Shakespeare.parse: text must be a str, bytes or a pathlib.Path, got "
                f"{type(text).__name__}"
            )
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"text is not valid UTF-8 ({e})") from e
        if len(text) < seq_len + 1:
            raise DataError(
                f"text has {len(text)} characters; seq_len {seq_len} needs at least "
                f"{seq_len + 1} (one window plus its shifted target)"
            )
        # Code points sort as Python sorts one-character strings: np.unique gives the sorted
        # vocabulary and every character's id in one pass.
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        uniq, ids = np.unique(codes, return_inverse=True)
        vocab = "".join(map(chr, uniq.tolist()))
        n = (len(text) - 1) // seq_len
        flat = torch.from_numpy(ids.astype(np.int64))
        data = flat[: n * seq_len].reshape(n, seq_len).clone()
        targets = flat[1 : n * seq_len + 1].reshape(n, seq_len).clone()
        return cls(data, targets, vocab)

    def encode(self, text: str) -> Tensor:
        """``(len(text),)`` ids; raises ``DataError`` on a character outside the vocabulary."""
        try:
            return torch.tensor([self.char_to_idx[c] for c in text], dtype=torch.int64)
        except KeyError as e:
            raise DataError(f"character {e.args[0]!r} is not in the vocabulary") from None

    def decode(self, ids: Tensor | list[int]) -> str:
        """The text of a 1-D sequence of ids ``(L,)``.

        Raises ``ShapeError`` for a batch ``(B, L)`` (decode each row) and ``DataError`` for an
        id outside ``0..vocab_size-1``: Python indexing would otherwise wrap a negative id to
        a wrong character silently.
        """
        if isinstance(ids, Tensor) and ids.dim() != 1:
            raise ShapeError(
                f"decode: ids must be 1-D (L,), got shape {tuple(ids.shape)}; decode one row "
                "at a time"
            )
        values = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        v = self.vocab_size
        for i in values:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < v:
                raise DataError(f"decode: id {i!r} is not a character id in 0..{v - 1}")
        return "".join(self.idx_to_char[i] for i in values)

    def split(self, train_fraction: float = 0.9) -> tuple[Shakespeare, Shakespeare]:
        """First ``train_fraction`` of the windows and the rest, sharing the vocabulary."""
        check_finite(train_fraction, "train_fraction", gt=0, lt=1, expected="in (0, 1)")
        n = len(self)
        cut = int(n * train_fraction)
        if cut == 0 or cut == n:
            raise DataError(
                f"{n} windows cannot be split {train_fraction:.0%} / rest with both parts "
                "non-empty; use a shorter seq_len or more text"
            )
        vocab = self.idx_to_char
        return (
            Shakespeare(self.data[:cut], self.targets[:cut], vocab),
            Shakespeare(self.data[cut:], self.targets[cut:], vocab),
        )

    @classmethod
    def from_cache(cls, cache_dir: str | Path, seq_len: int, **fetch_options: Any) -> Shakespeare:
        """:func:`fetch` ``"shakespeare"`` into ``cache_dir`` (if needed) and parse it.

        A file already in ``cache_dir`` must be the canonical one (checked by SHA-256); for your
        own text pass ``verify=False``, or call :meth:`parse` with ``Path(your_file)``.
        """
        from ._fetch import fetch

        files = fetch("shakespeare", cache_dir, **fetch_options)
        return cls.parse(files[cls.FILE].read_bytes(), seq_len)
