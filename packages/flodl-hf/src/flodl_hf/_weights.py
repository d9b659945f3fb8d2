"""Reading HF weight files: ``model.safetensors`` (memory-mapped, sharded or not) and, only
through ``torch.load(weights_only=True)``, ``pytorch_model.bin``.

Tensors keep the dtype stored in the file. Safetensors tensors are memory-mapped copy-on-write:
pages are read when first used, and writing to a parameter (training) never touches the file.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path, PurePosixPath, PureWindowsPath

import torch
from safetensors import SafetensorError, safe_open
from torch import Tensor

from flodl_core import CheckpointError, format_choices

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PYTORCH_BIN = "pytorch_model.bin"

WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, PYTORCH_BIN)


def find_weights(folder: Path) -> Path:
    """The weight file of a model folder, preferring safetensors; a clear error when none."""
    for name in WEIGHT_FILES:
        if (folder / name).is_file():
            return folder / name
    found = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    raise CheckpointError(
        f"no weights in {folder}: expected one of {format_choices(WEIGHT_FILES, sort=False)}; "
        f"the folder holds: {', '.join(found) or '(nothing)'}"
    )


def read_weights(path: str | Path) -> dict[str, Tensor]:
    """All tensors of a weight file (or of the weight file inside a model folder).

    ``.safetensors`` and ``.safetensors.index.json`` (shards) are memory-mapped; ``.bin`` / ``.pt``
    go through ``torch.load(weights_only=True)``, which refuses arbitrary pickled objects. Any
    other kind of file is refused.
    """
    path = Path(path)
    if path.is_dir():
        path = find_weights(path)
    if not path.is_file():
        raise CheckpointError(f"weight file {path} does not exist")
    name = path.name
    if name.endswith(".safetensors"):
        return _read_safetensors(path)
    if name.endswith(".safetensors.index.json"):
        return _read_sharded(path)
    if name.endswith((".bin", ".pt", ".pth")):
        return _read_torch(path)
    raise CheckpointError(
        f"{path}: unsupported weight format; expected .safetensors, a .safetensors.index.json "
        "of shards, or a PyTorch .bin (read with weights_only=True)"
    )


def _read_safetensors(path: Path) -> dict[str, Tensor]:
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iter)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable safetensors file: {e}") from None


def read_index(index: Path) -> dict[str, str]:
    """The ``weight_map`` (tensor name -> shard file) of a ``model.safetensors.index.json``.

    Each shard must be a relative name inside the index's folder (``model-00001-of-00002
    .safetensors``): an absolute path, a drive or a ``..`` part would read (or, from the Hub,
    fetch) a file outside the model, so such an index is refused before any shard is opened.
    """
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{index} is not a safetensors shard index: {e}") from None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{index}: weight_map must map each tensor name to a shard file name")
    outside = sorted({s for s in weight_map.values() if not _inside_folder(s)})
    if outside:
        raise CheckpointError(
            f"{index} names shard files outside its model folder: "
            f"{', '.join(repr(s) for s in outside[:5])}; nothing was loaded. A shard must be a "
            "file in the index's folder, named without '..', a drive or a leading '/' "
            "(e.g. 'model-00001-of-00002.safetensors')"
        )
    return weight_map


def _inside_folder(name: str) -> bool:
    """Whether ``name`` stays inside the folder it is joined to, on any OS. Checked on the name,
    not the resolved path: the HF cache's shards are symlinks into its blob store."""
    win = PureWindowsPath(name)
    return (
        bool(name)
        and "\\" not in name
        and not PurePosixPath(name).is_absolute()
        and not (win.drive or win.root)
        and ".." not in PurePosixPath(name).parts
    )


def _read_sharded(index: Path) -> dict[str, Tensor]:
    weight_map = read_index(index)
    out: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        out.update(_read_safetensors(index.parent / shard))
    missing = sorted(set(weight_map) - set(out))
    if missing:
        raise CheckpointError(
            f"{index} lists {len(missing)} tensors no shard holds, e.g. {', '.join(missing[:5])}"
        )
    return out


def _read_torch(path: Path) -> dict[str, Tensor]:
    try:
        try:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as e:
            if "mmap" not in str(e):
                raise
            # Legacy (pre-zip) files cannot be memory-mapped; read them whole.
            obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        raise CheckpointError(
            f"{path} holds objects other than tensors and was refused (weights_only=True): {e}; "
            "convert it to model.safetensors with a tool you trust"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as e:
        raise CheckpointError(f"{path} is not a readable PyTorch weight file: {e}") from None
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        obj = obj["state_dict"]
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()
    ):
        raise CheckpointError(f"{path} does not hold a flat name -> tensor dictionary")
    return obj
