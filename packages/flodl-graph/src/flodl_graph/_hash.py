"""The structural hash of a graph (SHA-256 over its structure, never over values).

Adapted from floDl (Rust)'s recipe: in topological order, each node's id and kind, its module's
class name, the name and class of every submodule inside it (so ``Sequential(Linear, ReLU)`` and
``Sequential(Linear, GELU)`` differ although their parameters do not), the names and shapes of
its parameters and buffers (a nested graph adds its own hash) and a merge's operation; then the
edges, the tags and the inputs/output. Dtypes, values and labels are not hashed, so a checkpoint
stays valid across dtype casts and relabeling.
"""

from __future__ import annotations

import hashlib
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

    from ._graph import Graph


def _dims(shape: tuple[int, ...]) -> bytes:
    return b"".join(struct.pack("<q", d) for d in shape)


def _hash_module(h: hashlib._Hash, m: nn.Module) -> None:
    """Feed one node's module into ``h``: its class, submodule classes, parameter and buffer
    names with their shapes (never values), and a nested graph's own structural hash."""
    from ._graph import Graph

    h.update(type(m).__name__.encode() + b"\0")
    if not isinstance(m, Graph):  # a nested graph's own hash covers its inside
        for name, sub in m.named_modules():
            if name:
                h.update(b"M" + name.encode() + b"\0" + type(sub).__name__.encode() + b"\0")
    for name, p in sorted(m.named_parameters(), key=lambda kv: kv[0]):
        h.update(b"P" + name.encode() + b"\0" + _dims(tuple(p.shape)))
    for name, b in sorted(m.named_buffers(), key=lambda kv: kv[0]):
        h.update(b"B" + name.encode() + b"\0" + _dims(tuple(b.shape)))
    if isinstance(m, Graph):
        h.update(b"G" + m.structural_hash().encode())


def structural_hash(graph: Graph) -> str:
    """64 lowercase hex characters."""
    plan = graph._plan
    h = hashlib.sha256()
    index = {n.id: i for i, n in enumerate(plan.nodes)}
    for node in plan.nodes:
        h.update(node.id.encode() + b"\0" + node.kind.encode() + b"\0")
        op = plan.options.get(node.id, {}).get("op")
        if op is not None:
            h.update(b"OP" + str(getattr(op, "value", op)).encode() + b"\0")
        if node.module is not None:
            _hash_module(h, node.module)
    h.update(b"EDGES")
    for node in plan.nodes:
        for port, src in enumerate(node.inputs):
            h.update(f"{src}\0output\0{node.id}\0input_{port}\0".encode())
        for ref in node.refs:
            h.update(f"{plan.tags[ref]}\0output\0{node.id}\0ref_{ref}\0".encode())
    h.update(b"TAGS")
    for tag in sorted(plan.tags):
        h.update(tag.encode() + b"\0" + struct.pack("<QQ", index[plan.tags[tag]], 0))
    h.update(b"INPUTS")
    h.update(f"input\0{plan.entry}\0input\0".encode())
    for name, nid in zip(plan.input_names, plan.input_nodes, strict=True):
        h.update(f"{name}\0{nid}\0input\0".encode())
    h.update(b"OUTPUTS")
    h.update(f"output\0{plan.output}\0output\0".encode())
    return h.hexdigest()


def structure_lines(graph: Graph) -> list[str]:
    """One readable line per node with what the hash covers of it (id, kind, module classes,
    merge op, inputs, tags), saved with checkpoints so a mismatch can name the first
    differing node."""
    from ._graph import Graph

    plan = graph._plan
    out = []
    for node in plan.nodes:
        parts = [node.id, node.kind]
        m = node.module
        if m is not None:
            inner = (
                ""
                if isinstance(m, Graph)
                else ",".join(
                    f"{name}:{type(sub).__name__}" for name, sub in m.named_modules() if name
                )
            )
            parts.append(f"{type(m).__name__}({inner})")
            if isinstance(m, Graph):
                parts.append(f"hash={m.short_hash()}")
        op = plan.options.get(node.id, {}).get("op")
        if op is not None:
            parts.append(f"op={getattr(op, 'value', op)}")
        if node.inputs:
            parts.append("<- " + ",".join(node.inputs))
        if node.tags:
            parts.append("#" + ",".join(node.tags))
        out.append(" ".join(parts))
    return out
