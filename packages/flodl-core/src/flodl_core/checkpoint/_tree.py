"""Nested state (``state_dict()`` of optimizers, schedulers, scalers) as JSON plus tensors.

JSON carries the structure; tensors are pulled out into a list and replaced by markers. What
JSON cannot say directly is spelled with one-key marker objects:

* ``{"$tensor": i}`` (plus ``"dtype"`` when the tensor was stored widened, e.g. ``"bool"``);
* ``{"$tuple": [...]}``, so ``betas=(0.9, 0.999)`` comes back a tuple;
* ``{"$dict": [[key, value], ...]}`` for dicts with non-string keys (optimizer state is keyed by
  parameter index) or with a key that is one of these markers;
* ``{"$float": "inf" | "-inf" | "nan"}``, keeping the JSON strict (``best=inf`` in plateau
  schedulers).

No pickle is involved: anything else is refused with its path in the state.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .._errors import CheckpointError
from ._tensors import TORCH_TO_TAG, check_storable, storage_dtype

_TENSOR, _TUPLE, _DICT, _FLOAT = "$tensor", "$tuple", "$dict", "$float"
_MARKERS = frozenset({_TENSOR, _TUPLE, _DICT, _FLOAT})
_DTYPES = {str(d).removeprefix("torch."): d for d in [*TORCH_TO_TAG, torch.bool, torch.uint8,
           torch.int8, torch.int16, torch.uint16, torch.uint32]}  # fmt: skip
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def flatten(obj: Any, tensors: list[torch.Tensor], path: str = "state") -> Any:
    """A JSON-able tree for ``obj``; tensors are appended to ``tensors``."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if math.isfinite(obj):
            return obj
        return {_FLOAT: "nan" if math.isnan(obj) else ("inf" if obj > 0 else "-inf")}
    if isinstance(obj, torch.Tensor):
        check_storable(obj, path)
        stored = storage_dtype(obj.dtype, path)
        node: dict[str, Any] = {_TENSOR: len(tensors)}
        if stored != obj.dtype:
            node["dtype"] = str(obj.dtype).removeprefix("torch.")
        tensors.append(obj.detach())
        return node
    if isinstance(obj, tuple):
        return {_TUPLE: [flatten(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [flatten(v, tensors, f"{path}[{i}]") for i, v in enumerate(obj)]
    if isinstance(obj, dict):
        if all(isinstance(k, str) and k not in _MARKERS for k in obj):
            return {k: flatten(v, tensors, f"{path}[{k!r}]") for k, v in obj.items()}
        return {
            _DICT: [
                [flatten(k, tensors, f"{path} key {k!r}"), flatten(v, tensors, f"{path}[{k!r}]")]
                for k, v in obj.items()
            ]
        }
    raise CheckpointError(
        f"{path} is a {type(obj).__name__}; state files hold None, bool, int, float, str, "
        "tensors, and lists, tuples and dicts of those"
    )


def _bad(path: str, why: str) -> CheckpointError:
    return CheckpointError(f"malformed state at {path}: {why}")


def unflatten(tree: Any, tensors: list[torch.Tensor], path: str = "state") -> Any:
    """The inverse of :func:`flatten`."""
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [unflatten(v, tensors, f"{path}[{i}]") for i, v in enumerate(tree)]
    if not isinstance(tree, dict):
        raise _bad(path, f"unexpected JSON value of type {type(tree).__name__}")
    marker = _MARKERS & tree.keys()
    if not marker:
        return {k: unflatten(v, tensors, f"{path}[{k!r}]") for k, v in tree.items()}
    kind = marker.pop()
    allowed = {_TENSOR, "dtype"} if kind == _TENSOR else {kind}
    if marker or not tree.keys() <= allowed:
        raise _bad(path, f"unexpected keys {sorted(tree)} in a {kind} marker")
    value = tree[kind]
    if kind == _TENSOR:
        return _tensor(value, tree.get("dtype"), tensors, path)
    if kind == _FLOAT:
        if value not in _NONFINITE:
            raise _bad(path, f"unknown float {value!r}")
        return _NONFINITE[value]
    if kind == _TUPLE:
        if not isinstance(value, list):
            raise _bad(path, "a $tuple must hold a list")
        return tuple(unflatten(v, tensors, f"{path}[{i}]") for i, v in enumerate(value))
    return _pairs_dict(value, tensors, path)


def _pairs_dict(value: Any, tensors: list[torch.Tensor], path: str) -> dict[Any, Any]:
    """A ``$dict`` marker's ``[key, value]`` pairs back as a dict (keys need not be strings)."""
    if not isinstance(value, list) or not all(isinstance(p, list) and len(p) == 2 for p in value):
        raise _bad(path, "a $dict must hold [key, value] pairs")
    out = {}
    for k, v in value:
        key = unflatten(k, tensors, f"{path} key")
        item = unflatten(v, tensors, f"{path}[{key!r}]")
        try:
            out[key] = item
        except TypeError:
            raise _bad(path, f"unhashable key {key!r}") from None
    return out


def _tensor(index: Any, dtype_name: Any, tensors: list[torch.Tensor], path: str) -> torch.Tensor:
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tensors):
        raise _bad(path, f"tensor index {index!r} out of range 0..{len(tensors) - 1}")
    t = tensors[index]
    if dtype_name is None:
        return t
    if dtype_name not in _DTYPES:
        raise _bad(path, f"unknown tensor dtype {dtype_name!r}")
    return t.to(_DTYPES[dtype_name])
