"""State files for optimizers, schedulers, grad scalers: anything with ``state_dict()``.

Layout (little-endian), gzip when the path ends ``.gz``::

    "FDLS"                  4-byte magic
    u32 version             1
    u32 kind_len, kind      UTF-8 class name of the object saved, e.g. "AdamW"
    u64 json_len, json      UTF-8 JSON of the state structure (see ``_tree``)
    u32 tensor_count
    tensor_count x entry    the .fdl entry encoding; names are the indices "0", "1", ...

floDl (Rust) writes these files headerless and type-specific; a self-identifying header
lets a Python loader refuse an Adam file handed to SGD with a clear error instead of misreading
it. Tensors are restored on the CPU: ``Optimizer.load_state_dict`` moves each to its parameter's
device itself.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Any, Protocol

import torch

from .._errors import CheckpointError, ConfigError
from ._format import FdlReader, write_entry
from ._io import PathLike, atomic_write, open_read
from ._moments import misfit
from ._tensors import tensor_from_bytes, tensor_to_bytes
from ._tree import flatten, unflatten

STATE_MAGIC = b"FDLS"
STATE_VERSION = 1
_MAX_KIND = 1 << 10


class Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> Any: ...


def state_kind(obj: object) -> str:
    """The kind written into, and checked against, a state file: the class's qualified name."""
    return type(obj).__qualname__


def save_state_file(obj: Stateful, path: PathLike) -> None:
    """Save ``obj.state_dict()`` to ``path`` atomically, without pickle.

    Works for ``torch.optim`` optimizers, LR schedulers, ``GradScaler`` and any object whose
    state is made of ``None``, bool, int, float, str, tensors, lists, tuples and dicts.
    """
    if not callable(getattr(obj, "state_dict", None)):
        raise ConfigError(f"save_state_file needs an object with state_dict(), got {type(obj)}")
    write_state(path, state_kind(obj), obj.state_dict())


def write_state(path: PathLike, kind: str, state: Any) -> None:
    """Write ``state`` as the state of a ``kind`` object (the layout above), atomically."""
    tensors: list[torch.Tensor] = []
    tree = flatten(state, tensors)
    text = json.dumps(tree, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    blob = text.encode("utf-8")
    kind_bytes = kind.encode("utf-8")
    encoded = [tensor_to_bytes(t, f"state tensor {i}") for i, t in enumerate(tensors)]
    with atomic_write(path) as f:
        f.write(STATE_MAGIC + struct.pack("<II", STATE_VERSION, len(kind_bytes)) + kind_bytes)
        f.write(struct.pack("<Q", len(blob)) + blob)
        f.write(struct.pack("<I", len(encoded)))
        for i, (shape, tag, data) in enumerate(encoded):
            write_entry(f, str(i), shape, tag, data)


def read_state_file(path: PathLike) -> tuple[str, Any]:
    """``(kind, state)`` from a state file, fully checked; loads into nothing."""
    path = os.fspath(path)
    with open_read(path, "state file", mapped=True) as (f, size):
        r = FdlReader(f, path, size, what="state file")
        r.read_magic(STATE_MAGIC, "flodl state file")
        version = r.read_u32("the version")
        if version != STATE_VERSION:
            raise r.fail(f"unsupported state file version {version}; expected {STATE_VERSION}")
        kind_len = r.read_u32("the kind length")
        if kind_len > _MAX_KIND:
            raise r.fail(f"kind length {kind_len} exceeds {_MAX_KIND} (corrupt file)")
        try:
            kind = r.read_exact(kind_len, "the kind").decode("utf-8")
            json_len = r.read_u64("the JSON length")
            tree = json.loads(r.read_exact(json_len, "the JSON structure").decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise r.fail(f"malformed header or JSON structure ({e})") from None
        count = r.read_u32("the tensor count")
        tensors = []
        for i in range(count):
            e = r.entry(i)
            assert e.data is not None
            # clone: the state outlives this call and must own its memory, not the file map
            tensors.append(tensor_from_bytes(e.data, e.shape, e.dtype).clone())
        r.expect_end()
    try:
        return kind, unflatten(tree, tensors)
    except CheckpointError as e:
        raise CheckpointError(f"state file {path}: {e}") from None


def _check_param_shapes(opt: torch.optim.Optimizer, state: Any, path: str) -> None:
    """Refuse element-wise state (:mod:`._moments`) that does not fit the parameter it would
    land on: the file was saved for another model."""
    if not isinstance(state, dict):
        return  # not an optimizer's layout: load_state_dict says what is wrong
    groups, per_param = state.get("param_groups"), state.get("state")
    if not isinstance(groups, list) or not isinstance(per_param, dict):
        return
    saved_ids = [i for g in groups if isinstance(g, dict) for i in g.get("params", [])]
    params = [p for g in opt.param_groups for p in g["params"]]
    if len(saved_ids) != len(params):
        return  # torch's own group-size check names this one
    names = [n for g in opt.param_groups for n in g.get("param_names", [])]
    for k, (saved_id, p) in enumerate(zip(saved_ids, params, strict=True)):
        bad = misfit(per_param.get(saved_id), p)
        if bad is not None:
            who = repr(names[k]) if len(names) == len(params) else f"{k}"
            raise CheckpointError(
                f"state file {path}: {state_kind(opt)} state {bad[0]!r} of parameter {who} has "
                f"shape {bad[1]} but the parameter has shape {tuple(p.shape)}; the file was "
                "saved for another model (migrate_optim_state_file carries state across a "
                "model change)"
            )


def load_state_file(obj: Stateful, path: PathLike) -> None:
    """Load a file written by :func:`save_state_file` into ``obj`` via ``load_state_dict``.

    The file must come from an object of the same class (an ``Adam`` file does not load into
    ``SGD``); an optimizer's per-parameter state must fit its parameters' shapes; the object's
    own checks (parameter counts, group sizes) then apply. A refused file leaves ``obj`` as it
    was.
    """
    if not callable(getattr(obj, "load_state_dict", None)):
        raise ConfigError(
            f"load_state_file needs an object with load_state_dict(), got {type(obj)}"
        )
    path = os.fspath(path)
    kind, state = read_state_file(path)
    if kind != state_kind(obj):
        raise CheckpointError(
            f"state file {path} holds {kind} state; cannot load it into {state_kind(obj)}"
        )
    if isinstance(obj, torch.optim.Optimizer):
        _check_param_shapes(obj, state, path)
    try:
        obj.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError, TypeError, IndexError) as e:
        raise CheckpointError(f"state file {path}: {kind} refused the state: {e}") from e
