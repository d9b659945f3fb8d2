"""Loading ``.fdl`` checkpoints into a module, all or nothing."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from torch import nn

from .._errors import CheckpointError
from ._format import ZERO_HASH
from ._hash import parse_hash
from ._io import PathLike
from ._module import check_module_and_path, module_tensors, plain_name
from ._read import read_checkpoint
from ._tensors import tensor_from_bytes


@dataclass(frozen=True)
class LoadReport:
    """What a load did.

    ``loaded``: model names given a value from the file (model order). ``skipped``: file names
    no model tensor matched (file order). ``missing``: model names absent from the file (model
    order). ``metadata``: the file's metadata dict (empty when it has none). ``verified``: every
    entry matched the CRC32 recorded in the file; ``False`` for a file written without checksums
    (older files, other writers), which loads all the same. ``str(report)`` says which.
    """

    loaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    verified: bool = False

    @property
    def integrity(self) -> str:
        """``"verified (CRC32)"`` or ``"not verified (the file carries no checksums)"``."""
        if self.verified:
            return "verified (CRC32)"
        return "not verified (the file carries no checksums)"

    def __str__(self) -> str:
        return (
            f"loaded {len(self.loaded)} tensor(s), skipped {len(self.skipped)}, missing "
            f"{len(self.missing)}; integrity: {self.integrity}"
        )


def _names(names: list[str], limit: int = 20) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def load_checkpoint(
    module: nn.Module,
    path: PathLike,
    strict: bool = True,
    expected_hash: str | None = None,
) -> LoadReport:
    """Load a ``.fdl`` file (gzip when ``*.gz``) into ``module`` by exact ``state_dict`` name.

    Strict by default: a model tensor missing from the file or a file tensor the model lacks is
    an error listing them; ``strict=False`` loads what matches and reports the rest. A shape
    mismatch is always an error. Values are converted to each model tensor's dtype and device.
    When ``expected_hash`` and the file's hash are both set and differ, the architectures differ
    and nothing is loaded.

    The whole file is read and checked before the module is touched: on any error the module is
    left exactly as it was.
    """
    check_module_and_path("load_checkpoint", module, path)
    expected = parse_hash(expected_hash, "expected_hash")
    ckpt = read_checkpoint(path)
    file_hash = ckpt.header.hash
    if expected != ZERO_HASH and file_hash != ZERO_HASH and expected != file_hash:
        raise CheckpointError(
            f"checkpoint {ckpt.path}: architecture mismatch: file={file_hash.hex()} "
            f"model={expected.hex()}"
        )

    targets = module_tensors(module)  # by plain_name, as files name them
    entries = {plain_name(e.name): e for e in ckpt.entries}  # (and files of compiled models did)
    target_names = {name for name, _ in targets}
    missing = [name for name, _ in targets if name not in entries]
    skipped = [e.name for e in ckpt.entries if plain_name(e.name) not in target_names]
    if strict and (missing or skipped):
        parts = []
        if missing:
            parts.append(f"missing from the file: {_names(missing)}")
        if skipped:
            parts.append(f"not in the model: {_names(skipped)}")
        raise CheckpointError(
            f"checkpoint {ckpt.path} does not match the model ({'; '.join(parts)}); "
            "pass strict=False to load the matching part"
        )

    mismatched = [
        f"{name}: file {list(entries[name].shape)} vs model {list(t.shape)}"
        for name, t in targets
        if name in entries and entries[name].shape != tuple(t.shape)
    ]
    if mismatched:
        raise CheckpointError(
            f"checkpoint {ckpt.path}: shape mismatch for {len(mismatched)} tensor(s): "
            + "; ".join(mismatched)
        )

    values: OrderedDict[str, torch.Tensor] = OrderedDict()
    for name, t in targets:
        if name in entries:
            e = entries[name]
            assert e.data is not None
            values[name] = tensor_from_bytes(e.data, e.shape, e.dtype).to(
                device=t.device, dtype=t.dtype
            )
    # load_state_dict keeps parameter identity (optimizers hold references) and runs the
    # modules' own load hooks; the per-module versions keep their upgrade logic quiet.
    own = module.state_dict(keep_vars=True)
    real = {plain_name(k): k for k in own}  # a compiled model's keys carry _orig_mod.
    state = OrderedDict((real[k], v) for k, v in values.items())
    state._metadata = getattr(own, "_metadata", None)  # type: ignore[attr-defined]
    try:
        module.load_state_dict(state, strict=False)
    except (RuntimeError, ValueError, KeyError) as e:
        raise CheckpointError(f"checkpoint {ckpt.path}: module refused the state: {e}") from e
    return LoadReport(
        loaded=list(values),
        skipped=skipped,
        missing=missing,
        metadata=dict(ckpt.metadata),
        verified=ckpt.verified,
    )
