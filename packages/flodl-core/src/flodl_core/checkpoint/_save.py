"""Writing ``.fdl`` checkpoints."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from .._errors import CheckpointError, ConfigError
from ._format import encode_header, write_entry
from ._hash import parse_hash
from ._io import PathLike, atomic_write
from ._meta import META_NAME, check_metadata, encode_metadata, with_checksums
from ._module import check_module_and_path, module_tensors
from ._tensors import check_storable, tensor_to_bytes


def save_checkpoint(
    module: nn.Module,
    path: PathLike,
    hash: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Save every tensor of ``module.state_dict()`` to a ``.fdl`` file (gzip when ``*.gz``).

    ``hash`` is the model's structural hash (64 hex chars) checked again at load time, or
    ``None`` for none. ``metadata`` is free-form ``str -> str`` information stored alongside
    (read it back with :func:`read_checkpoint_metadata`). The write is atomic: the file at
    ``path`` is either the old one or the complete new one.
    """
    check_module_and_path("save_checkpoint", module, path)
    write_checkpoint(path, module_tensors(module), hash=hash, metadata=metadata)


def _pairs(tensors: object) -> list[tuple[str, torch.Tensor]]:
    """``tensors`` as a list of ``(name, value)`` pairs: a mapping gives its items in order
    (``model.state_dict()``), any other iterable its items; a ConfigError names the rest."""
    if isinstance(tensors, Mapping):
        tensors = tensors.items()
    if isinstance(tensors, (str, bytes)) or not isinstance(tensors, Iterable):
        raise ConfigError(
            "write_checkpoint: tensors must be (name, tensor) pairs or a mapping of names to "
            f"tensors, got {type(tensors).__name__}"
        )
    pairs = list(tensors)
    for i, item in enumerate(pairs):
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
            raise ConfigError(
                f"write_checkpoint: tensors[{i}] must be a (name: str, tensor) pair, got "
                f"{type(item).__name__} {item!r:.80}"
            )
    return pairs


def write_checkpoint(
    path: PathLike,
    tensors: Iterable[tuple[str, torch.Tensor]] | Mapping[str, torch.Tensor],
    hash: str | None = None,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Save named tensors, in the given order, as a ``.fdl`` file: ``(name, tensor)`` pairs or
    a mapping of names to tensors (``model.state_dict()``).

    Everything is validated before the file is opened, so a refused save writes nothing. The
    reserved metadata entry records a CRC32 of every tensor's bytes, checked again on load.
    """
    hash_bytes = parse_hash(hash)
    meta = check_metadata(metadata)
    tensors = _pairs(tensors)
    seen: set[str] = set()
    for name, t in tensors:
        if not isinstance(t, torch.Tensor):
            raise CheckpointError(f"{name!r} is a {type(t).__name__}, not a tensor")
        if name in seen:
            raise CheckpointError(f"duplicate tensor name {name!r}")
        if name == META_NAME:
            raise CheckpointError(f"tensor name {META_NAME!r} is reserved for file metadata")
        seen.add(name)
        check_storable(t, name)
    count = len(tensors) + 1  # + the metadata entry, which always carries the checksums
    crcs: dict[str, int] = {}
    with atomic_write(path) as f:
        f.write(encode_header(hash_bytes, count))
        for name, t in tensors:
            shape, tag, data = tensor_to_bytes(t, name)
            crcs[name] = write_entry(f, name, shape, tag, data)
        shape, tag, data = encode_metadata(with_checksums(meta, crcs))
        write_entry(f, META_NAME, shape, tag, data)
