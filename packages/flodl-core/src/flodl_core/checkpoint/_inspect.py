"""Looking inside a ``.fdl`` file without a model: keys, version, hash, metadata."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._hash import hash_hex
from ._io import PathLike
from ._read import read_checkpoint, read_header
from ._tensors import TAG_TO_TORCH


@dataclass(frozen=True)
class CheckpointKey:
    """One tensor of a checkpoint: its name, shape and stored dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype


def checkpoint_keys(path: PathLike) -> list[CheckpointKey]:
    """Every tensor's name, shape and dtype, in file order; tensor data is skipped, not read.

    The whole file is still checked (a truncated file raises); on a ``.gz`` file the skipped
    bytes are decompressed, since gzip cannot seek.
    """
    ckpt = read_checkpoint(path, with_data=False)
    return [CheckpointKey(e.name, e.shape, TAG_TO_TORCH[e.dtype]) for e in ckpt.entries]


def checkpoint_version(path: PathLike) -> int:
    """The format version in the header (1 or 2)."""
    return read_header(path).version


def checkpoint_hash(path: PathLike) -> str | None:
    """The structural hash in the header as 64 hex chars, or ``None`` when the file has none."""
    return hash_hex(read_header(path).hash)


def read_checkpoint_metadata(path: PathLike) -> dict[str, str]:
    """The metadata dict saved with the file (empty when it has none)."""
    return read_checkpoint(path, with_data=False).metadata
