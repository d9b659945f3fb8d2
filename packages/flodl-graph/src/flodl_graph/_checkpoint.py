"""Graph checkpoints on top of flodl-core's ``.fdl`` format.

A graph checkpoint is an ordinary ``.fdl`` file (tensors by ``state_dict`` name, gzip when the
path ends in ``.gz``) whose header carries the graph's structural hash, plus metadata:

- ``flodl.frozen``: JSON list of the parameter names that had ``requires_grad=False``. Loading
  restores exactly that set, so resuming after an unfreeze does not silently re-freeze (or
  forget to re-freeze) part of the model;
- ``flodl.label`` and ``flodl.hash``: what was saved, for humans and error messages;
- ``flodl.structure``: JSON list, one line per node (see ``structure_lines``), so loading into
  another architecture says which node differs first, not only that two hashes differ.

Every load reads and checks the whole file before the model is touched: on any error nothing
changes (weights, buffers and the frozen set alike).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from flodl_core import CheckpointError, ConfigError, check_path
from flodl_core.checkpoint import (
    LoadReport,
    checkpoint_hash,
    checkpoint_keys,
    load_checkpoint,
    read_checkpoint_metadata,
    save_checkpoint,
)

from ._hash import structure_lines

if TYPE_CHECKING:
    from ._graph import Graph

__all__ = ["FROZEN_KEY", "load_graph", "load_subgraph", "save_graph"]

FROZEN_KEY = "flodl.frozen"
LABEL_KEY = "flodl.label"
HASH_KEY = "flodl.hash"
STRUCTURE_KEY = "flodl.structure"
_RESERVED = "flodl."

logger = logging.getLogger("flodl.graph")


def _all_param_names(g: Graph) -> list[tuple[str, bool]]:
    # remove_duplicate=False: a tied weight is saved under each of its state_dict names.
    return [(n, p.requires_grad) for n, p in g.named_parameters(remove_duplicate=False)]


def save_graph(
    g: Graph, path: str | os.PathLike[str], metadata: Mapping[str, str] | None = None
) -> None:
    """Write ``g`` with its structural hash, label and frozen set."""
    meta = dict(metadata or {})
    reserved = sorted(k for k in meta if isinstance(k, str) and k.startswith(_RESERVED))
    if reserved:
        raise ConfigError(
            f"metadata keys starting with {_RESERVED!r} are reserved for flodl: {reserved}"
        )
    h = g.structural_hash()
    meta[FROZEN_KEY] = json.dumps([n for n, req in _all_param_names(g) if not req])
    meta[LABEL_KEY] = g.label or ""
    meta[HASH_KEY] = h
    meta[STRUCTURE_KEY] = json.dumps(structure_lines(g))
    save_checkpoint(g, path, hash=h, metadata=meta)


def _frozen_from(meta: Mapping[str, str], source: str) -> set[str] | None:
    """The frozen set stored in ``meta``; None for files saved without one."""
    raw = meta.get(FROZEN_KEY)
    if raw is None:
        return None
    try:
        names = json.loads(raw)
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"checkpoint {source}: malformed {FROZEN_KEY!r} metadata: {e}"
        ) from None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CheckpointError(
            f"checkpoint {source}: {FROZEN_KEY!r} metadata must be a JSON list of names"
        )
    return set(names)


def _list(names: list[str], limit: int = 8) -> str:
    more = f", ... ({len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def describe_mismatch(g: Graph, source: str, meta: Mapping[str, str], file_hash: str) -> str:
    """Why the file at ``source`` is not a checkpoint of ``g``: tensors that differ by name or
    shape, and the first node whose structure differs (from the saved structure lines)."""
    expected = g.structural_hash()
    saved_as = meta.get(LABEL_KEY) or "(unlabeled)"
    lines = [
        f"checkpoint {source}: architecture mismatch: it was saved from graph {saved_as!r} "
        f"(hash {file_hash[:8]}), this graph {g.label or '(unlabeled)'!r} has hash {expected[:8]}"
    ]
    file_shapes = {k.name: list(k.shape) for k in checkpoint_keys(source)}
    model_shapes = {n: list(t.shape) for n, t in g.state_dict().items()}
    missing = [n for n in model_shapes if n not in file_shapes]
    unexpected = [n for n in file_shapes if n not in model_shapes]
    shapes = [
        f"{n} (file {file_shapes[n]}, model {model_shapes[n]})"
        for n in model_shapes
        if n in file_shapes and file_shapes[n] != model_shapes[n]
    ]
    if missing:
        lines.append(f"missing from the file: {_list(missing)}")
    if unexpected:
        lines.append(f"unexpected in the file: {_list(unexpected)}")
    if shapes:
        lines.append(f"shape mismatch: {_list(shapes)}")
    try:
        saved = json.loads(meta[STRUCTURE_KEY]) if STRUCTURE_KEY in meta else None
    except json.JSONDecodeError:
        saved = None
    if isinstance(saved, list):
        ours = structure_lines(g)
        for i, (a, b) in enumerate(zip(saved, ours, strict=False)):
            if a != b:
                lines.append(f"first differing node (#{i}): file {a!r}, model {b!r}")
                break
        else:
            if len(saved) != len(ours):
                lines.append(f"node count differs: file {len(saved)}, model {len(ours)}")
    elif not (missing or unexpected or shapes):
        lines.append(
            "every tensor name and shape matches, so the difference is in parameter-free "
            "structure (an activation, a merge op, the wiring or the tags)"
        )
    lines.append(
        "load it into the model that saved it, or use load_checkpoint(model, path, strict=False) "
        "from flodl_core.checkpoint to load matching tensors by name without the check"
    )
    return "; ".join(lines)


def _source(call: str, path: object) -> str:
    """``path`` as a str, or a ConfigError naming ``call`` for anything that is not a path."""
    return check_path(path, "the checkpoint file", where=call)


def load_graph(g: Graph, path: str | os.PathLike[str], strict: bool = True) -> LoadReport:
    """Load into ``g`` (hash checked) and restore the saved frozen set on what was loaded."""
    source = _source("load_checkpoint", path)
    # Validate the metadata first: once load_checkpoint returns, the weights are in.
    meta = read_checkpoint_metadata(source)
    frozen = _frozen_from(meta, source)
    file_hash = checkpoint_hash(source)
    if file_hash is not None and file_hash != g.structural_hash():
        raise CheckpointError(describe_mismatch(g, source, meta, file_hash))
    report = load_checkpoint(g, source, strict=strict, expected_hash=g.structural_hash())
    if frozen is not None:
        loaded = set(report.loaded)
        for name, p in g.named_parameters(remove_duplicate=False):
            if name in loaded:
                p.requires_grad_(name not in frozen)
    return report


def _namespace_hint(file_names: list[str], sub_names: list[str], path: str) -> str:
    """Explain a name mismatch, spotting the common "saved from the parent" case."""
    files = set(file_names)
    for prefix in (f"{path}.", *{n[: n.index(".") + 1] for n in file_names if "." in n}):
        if sub_names and all(prefix + n in files for n in sub_names):
            return (
                f"the file's names carry the prefix {prefix!r} (it was saved from an enclosing "
                "graph); save the component on its own, or load the whole model with "
                "load_checkpoint"
            )
    missing = [n for n in sub_names if n not in files]
    extra = [n for n in file_names if n not in set(sub_names)]
    parts = []
    if missing:
        parts.append(f"missing from the file: {', '.join(missing[:10])}")
    if extra:
        parts.append(f"not in the subgraph: {', '.join(extra[:10])}")
    return "; ".join(parts)


def load_subgraph(
    root: Graph, path: str, file: str | os.PathLike[str], strict: bool = True
) -> LoadReport:
    """Load a standalone component's checkpoint into the subgraph at ``path``.

    Checked, in order, before anything is written: the path names a subgraph; the file exists
    and parses; its hash (when it has one) equals the subgraph's; its tensor names are the
    subgraph's own ``state_dict`` names (all of them unless ``strict=False``). The frozen set
    stored in the file is not applied: the composed model decides what is frozen.
    """
    sub = root.subgraph(path)
    source = _source("load_subgraph_checkpoint", file)
    file_names = [k.name for k in checkpoint_keys(source)]
    file_hash = checkpoint_hash(source)
    meta = read_checkpoint_metadata(source)
    saved_as = meta.get(LABEL_KEY) or "(unlabeled)"
    expected = sub.structural_hash()
    if file_hash is not None and file_hash != expected:
        raise CheckpointError(
            f"cannot load {source} into subgraph {path!r}: architecture mismatch "
            f"(file hash {file_hash[:8]} saved from graph {saved_as!r}, subgraph hash "
            f"{expected[:8]})"
        )
    sub_names = list(sub.state_dict().keys())
    matched = set(file_names) & set(sub_names)
    if not matched or (strict and set(file_names) != set(sub_names)):
        raise CheckpointError(
            f"cannot load {source} into subgraph {path!r}: tensor names do not match the "
            f"subgraph's namespace ({_namespace_hint(file_names, sub_names, path)})"
        )
    report = load_checkpoint(sub, source, strict=strict, expected_hash=expected)
    logger.info(
        "loaded %d tensors from %s into %r (%d skipped, %d missing)",
        len(report.loaded),
        source,
        path,
        len(report.skipped),
        len(report.missing),
    )
    return report
