"""The planner: checks what the builder recorded and resolves it once into a :class:`Plan`.

Every check that needs the whole graph lives here (open streams, unresolved forward refs,
names, nested-graph labels, cycles); the topological order and the Kahn levels are computed
once, so nothing is resolved again per call.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from ._spec import NodeInfo, NodeKind, NodeRecord, Plan, Recording


def _preds(node: NodeRecord, tags: Mapping[str, str]) -> list[str]:
    """Nodes whose value ``node`` reads in the same call: stream inputs and backward refs."""
    out = list(node.inputs)
    out += [tags[r] for r in node.refs if r not in node.forward_refs and r in tags]
    return out


def order_and_levels(
    nodes: Mapping[str, NodeRecord], tags: Mapping[str, str]
) -> tuple[list[str], list[list[str]], list[str]]:
    """(stable topological order, Kahn levels, ids left in a cycle).

    The order takes the earliest-recorded ready node first, so it is the recording order
    whenever that is already topological. Levels group nodes by longest distance from an input.
    """
    index = {nid: i for i, nid in enumerate(nodes)}
    indeg = dict.fromkeys(nodes, 0)
    succs: dict[str, list[str]] = {nid: [] for nid in nodes}
    for nid, node in nodes.items():
        for p in _preds(node, tags):
            indeg[nid] += 1
            succs[p].append(nid)
    ids = list(nodes)
    ready = [index[n] for n, d in indeg.items() if d == 0]
    level_of = {ids[i]: 0 for i in ready}
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        nid = ids[heapq.heappop(ready)]
        order.append(nid)
        for s in succs[nid]:
            level_of[s] = max(level_of.get(s, 0), level_of[nid] + 1)
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(ready, index[s])
    stuck = [n for n in nodes if indeg[n] > 0]
    levels: list[list[str]] = []
    for nid in sorted(order, key=lambda n: (level_of[n], index[n])):
        while len(levels) <= level_of[nid]:
            levels.append([])
        levels[level_of[nid]].append(nid)
    return order, levels, stuck


def _node_name(node: NodeRecord) -> str:
    if node.tags:
        return node.tags[0]
    label = getattr(node.module, "label", None) if node.kind is NodeKind.GRAPH else None
    return label if isinstance(label, str) and label else node.id


def _check_empty(rec: Recording) -> list[str]:
    """A graph of inputs only is an error rather than a silent identity (reported only when
    the chain itself recorded no error: a failed first call leaves the graph empty too)."""
    if rec.errors or any(n.kind is not NodeKind.INPUT for n in rec.nodes):
        return []
    return [
        "build(): the graph is empty (FlowBuilder() with no node); start it with "
        "FlowBuilder(module) or add .through(module) before build(); for a "
        "deliberate identity use FlowBuilder(nn.Identity())"
    ]


def _check_pending(rec: Recording) -> list[str]:
    """Forward refs that no later tag or input resolved."""
    if not rec.pending:
        return []
    waiting = ", ".join(f"{t!r} (used by {', '.join(ids)})" for t, ids in rec.pending.items())
    return [
        f"build(): unresolved forward refs: {waiting}; tag them later in the chain "
        "or declare them with input([...])"
    ]


def _check_streams(rec: Recording) -> list[str]:
    """A split must be merged before build (an untagged fork is fine: it runs for its side
    effects, e.g. BatchNorm statistics)."""
    if len(rec.streams) <= 1:
        return []
    return [
        f"build(): open streams: {', '.join(rec.streams)} are still split; "
        "call merge(...) before build()"
    ]


def _internal_tags(rec: Recording) -> tuple[set[str], list[str]]:
    """The tags hidden from parent graphs (``_``-prefixed or marked ``internal``), and the
    errors of ``internal(...)`` calls naming no tag."""
    internal = {t for t in rec.tags if t.startswith("_")}
    errors = []
    for t in rec.internal:
        if t in rec.tags:
            internal.add(t)
        elif t in rec.groups:
            internal.update(rec.groups[t])
        else:
            known = sorted(rec.tags) or "(none)"
            errors.append(f"internal({t!r}): no such tag; known tags: {known}")
    return internal, errors


def _submodule_names(rec: Recording) -> tuple[dict[str, str], list[str]]:
    """node id -> the name its module is registered under (the first tag, else a nested
    graph's label, else the id), and the errors of names taken twice or shadowing Graph."""
    from ._graph import Graph

    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    errors = []
    for node in rec.nodes:
        if node.module is None:
            continue
        name = names[node.id] = _node_name(node)
        if name in owner:
            errors.append(
                f"{node.call}: submodule name {name!r} is already used by {owner[name]}; "
                "tag one of them differently"
            )
        owner[name] = node.id
        if hasattr(Graph, name):
            errors.append(
                f"{node.call}: {name!r} cannot name a submodule, it is an attribute of Graph; "
                "choose another tag"
            )
    return names, errors


def _check_children(rec: Recording) -> list[str]:
    """Nested graphs: labels unique and not a tag of another node; refs = the child's inputs.

    Dotted labels never get here: ``FlowBuilder.label`` rejects them at the child's build.
    """
    from ._graph import Graph

    labels: dict[str, str] = {}
    errors = []
    for node in rec.nodes:
        child = node.module
        if not isinstance(child, Graph):
            continue
        if child.label is not None:
            if child.label in labels:
                errors.append(
                    f"{node.call}: duplicate child label {child.label!r} "
                    f"(also on {labels[child.label]})"
                )
            elif child.label in rec.tags and rec.tags[child.label] != node.id:
                errors.append(
                    f"{node.call}: the child label {child.label!r} collides with the tag "
                    f"on {rec.tags[child.label]}"
                )
            labels[child.label] = node.id
        given, wanted = set(node.refs), set(child.input_names)
        if given != wanted:
            errors.append(
                f"{node.call}: the nested graph takes inputs {sorted(wanted)} but receives "
                f"refs {sorted(given)}; pass exactly its inputs with .using([...])"
            )
    return errors


def _check_input_names(rec: Recording, ids: Iterable[str]) -> list[str]:
    """An auxiliary input may not share its name with a node id (both are locals)."""
    clash = sorted({name for name, _ in rec.inputs} & set(ids))
    return [f"input({clash[0]!r}): the name collides with a node id; rename it"] if clash else []


def _check_cycle(stuck: list[str]) -> list[str]:
    if not stuck:
        return []
    return [
        f"build(): cycle detected in graph: {', '.join(stuck)} read each other through "
        "using() refs (a ref cannot read a value computed from its own target; "
        "tag a later value to make it a forward ref instead)"
    ]


def resolve(rec: Recording) -> tuple[Plan | None, list[str]]:
    """Check a builder's recording and resolve it: (plan, []) or (None, every error)."""
    nodes = {n.id: n for n in rec.nodes}
    internal, internal_errors = _internal_tags(rec)
    names, name_errors = _submodule_names(rec)
    order, levels, stuck = order_and_levels(nodes, rec.tags)
    errors = [
        *rec.errors,
        *_check_empty(rec),
        *_check_pending(rec),
        *_check_streams(rec),
        *internal_errors,
        *name_errors,
        *_check_children(rec),
        *_check_input_names(rec, nodes),
        *_check_cycle(stuck),
    ]
    if errors:
        return None, errors
    level_of = {nid: i for i, lvl in enumerate(levels) for nid in lvl}
    infos = tuple(
        NodeInfo(
            id=nid,
            name=names.get(nid, nid),
            kind=NodeKind(nodes[nid].kind),
            module=nodes[nid].module,
            tags=nodes[nid].tags,
            inputs=nodes[nid].inputs,
            refs=nodes[nid].refs,
            forward_refs=tuple(r for r in nodes[nid].refs if r in nodes[nid].forward_refs),
            level=level_of[nid],
            internal=bool(nodes[nid].tags) and all(t in internal for t in nodes[nid].tags),
        )
        for nid in order
    )
    return Plan(
        nodes=infos,
        levels=tuple(tuple(lvl) for lvl in levels),
        output=rec.streams[0],
        entry=rec.entry,
        input_names=tuple(n for n, _ in rec.inputs),
        input_nodes=tuple(i for _, i in rec.inputs),
        tags=dict(rec.tags),
        tag_groups=dict(rec.groups),
        internal_tags=frozenset(internal),
        state_tags=tuple(t for t in rec.tags if any(t in n.forward_refs for n in rec.nodes)),
        label=rec.label,
        options={n.id: dict(n.options) for n in rec.nodes if n.options},
    ), []
