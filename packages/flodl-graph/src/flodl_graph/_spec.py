"""The data the builder records and the plan a built graph runs: the node kinds, the node
drafts and records, the frozen :class:`Recording` the planner reads, NodeInfo and Plan."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

from torch import nn


class NodeKind(str, Enum):
    """What a node is: ``NodeInfo.kind``. A ``str`` enum, so ``node.kind == "loop"`` holds."""

    INPUT = "input"  # graph input: the entry stream (#0) or an auxiliary input; no module
    MODULE = "module"  # a module on the stream (the first module, ``through``)
    ALSO = "also"  # a branch module of a residual (``also``, both modules of ``also_with``)
    ADD = "add"  # the residual sum of ``also``/``also_with``; no module
    FORK = "fork"  # a side-branch module (``fork``): computed, the stream goes on unchanged
    SPLIT = "split"  # one branch module of ``split``
    MERGE = "merge"  # the join of a split (``MergeOp.ADD`` / ``MergeOp.MEAN``); no module
    LOOP = "loop"  # ``loop_body(...)``: module is a ``nodes.Loop`` holding ``body`` (and ``cond``)
    GATE = "gate"  # ``gate(...)``: module is a ``nodes.Gate`` holding ``router`` and ``experts``
    SWITCH = "switch"  # ``switch(...)``: module is a ``nodes.Switch`` holding router/branches
    MAP = "map"  # ``map(...)``: module is a ``nodes.Map`` holding ``body``
    GRAPH = "graph"  # any node whose module is a nested ``Graph`` (whatever call placed it)

    # Print and format as the plain value ("loop"), as the kinds did when they were strings.
    __str__ = str.__str__
    __format__ = str.__format__


#: Every value ``NodeInfo.kind`` can take, as plain strings.
NODE_KINDS: tuple[str, ...] = tuple(k.value for k in NodeKind)


class MergeOp(str, Enum):
    """How ``merge`` joins the streams of a ``split``: their sum, or their mean."""

    ADD = "add"
    MEAN = "mean"


@dataclass(frozen=True)
class NodeInfo:
    """One node of a built graph, as the tree, observation and visualization code read it.

    ``id`` is stable (``"{snake_case class}_{counter}"``, e.g. ``linear_3``); ``name`` is the
    submodule name the node's module is registered under (first tag, else the label of a
    labeled nested graph, else the id); ``inputs`` are the ids of the stream predecessors (in
    port order); ``refs`` the tag names read through ``using`` (``forward_refs`` the subset
    whose values come from the previous call); ``level`` the topological level (Kahn).
    """

    id: str
    name: str
    kind: NodeKind
    module: nn.Module | None
    tags: tuple[str, ...]
    inputs: tuple[str, ...]
    refs: tuple[str, ...]
    forward_refs: tuple[str, ...]
    level: int
    internal: bool


@dataclass(frozen=True)
class NodeRecord:
    """One node as the builder recorded it (frozen: the builder drafts it, then freezes it)."""

    id: str
    kind: NodeKind
    module: nn.Module | None
    inputs: tuple[str, ...]
    call: str  # the builder call that made it, as errors name it (``through(linear_2)``)
    tags: tuple[str, ...] = ()
    refs: tuple[str, ...] = ()
    forward_refs: frozenset[str] = frozenset()  # refs whose values come from the previous call
    options: Mapping[str, Any] = field(default_factory=dict)  # kind options (the merge op)


@dataclass
class NodeDraft:
    """A node while the builder records it (tags and refs arrive after it is created);
    ``freeze()`` makes its :class:`NodeRecord`."""

    id: str
    kind: NodeKind
    module: nn.Module | None
    inputs: list[str]
    call: str
    tags: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    forward_refs: set[str] = field(default_factory=set)
    options: dict[str, Any] = field(default_factory=dict)

    def freeze(self) -> NodeRecord:
        return NodeRecord(
            self.id,
            self.kind,
            self.module,
            tuple(self.inputs),
            self.call,
            tuple(self.tags),
            tuple(self.refs),
            frozenset(self.forward_refs),
            MappingProxyType(dict(self.options)),
        )


@dataclass(frozen=True)
class Recording:
    """Everything a :class:`FlowBuilder` recorded, frozen at ``build()``: what the planner reads.

    ``nodes`` are in recording order; ``tags`` map tag -> node id in tagging order; ``pending``
    holds forward refs no later tag or input resolved (tag -> the node ids reading it);
    ``inputs`` are the auxiliary inputs as (name, node id); ``streams`` the streams still open.
    """

    nodes: tuple[NodeRecord, ...]
    errors: tuple[str, ...]
    tags: Mapping[str, str]
    pending: Mapping[str, tuple[str, ...]]
    groups: Mapping[str, tuple[str, ...]]
    inputs: tuple[tuple[str, str], ...]
    internal: tuple[str, ...]
    streams: tuple[str, ...]
    entry: str
    label: str | None


@dataclass(frozen=True)
class Plan:
    """A resolved graph: what ``Graph`` registers, codegen emits and the tree/viz code reads."""

    nodes: tuple[NodeInfo, ...]  # topological (insertion) order
    levels: tuple[tuple[str, ...], ...]
    output: str
    entry: str
    input_names: tuple[str, ...]
    input_nodes: tuple[str, ...]
    tags: dict[str, str]  # tag -> node id
    tag_groups: dict[str, tuple[str, ...]]
    internal_tags: frozenset[str]
    state_tags: tuple[str, ...]  # tags written to forward-ref state
    label: str | None
    options: dict[str, dict[str, Any]]  # node id -> kind options (the merge op of merges)


_CAMEL = re.compile(r"(?<=.)(?=[A-Z][a-z])")


def snake_name(cls_name: str) -> str:
    """``LayerNorm`` -> ``layer_norm``, ``GELU`` -> ``gelu``, ``LSTMCell`` -> ``lstm_cell``."""
    s = _CAMEL.sub("_", cls_name).lower()
    s = re.sub(r"[^a-z0-9_]+", "_", s)
    s = re.sub(r"_+", "_", s).strip("_")
    if not s or s[0].isdigit():
        s = "m" + s
    return s


_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")


def tag_problem(name: object) -> str | None:
    """Why ``name`` cannot be a tag (a dotted-path segment and a submodule name), or None.

    Letters, digits, ``_`` and ``-``; numeric tags (``"0"``, ``"11"``) are legal.
    """
    if not isinstance(name, str):
        return f"a tag must be a str, got {type(name).__name__}"
    if not _TAG.match(name):
        return (
            f"invalid tag {name!r}: expected letters, digits, '_' or '-' "
            "(no dots: dots separate graph path segments)"
        )
    return None
