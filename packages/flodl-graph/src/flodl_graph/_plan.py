"""The planner: checks what the builder recorded and resolves it once into a :class:`Plan`.

Every check that needs the whole graph lives here (open streams, unresolved forward refs,
names, nested-graph labels, cycles); the topological order and the Kahn levels are computed
once, so nothing is resolved again per call.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from ._spec import NodeInfo, NodeRecord, Plan

if TYPE_CHECKING:
    from ._builder import FlowBuilder


def _preds(node: NodeRecord, tags: dict[str, str]) -> list[str]:
    """Nodes whose value ``node`` reads in the same call: stream inputs and backward refs."""
    out = list(node.inputs)
    out += [tags[r] for r in node.refs if r not in node.forward_refs and r in tags]
    return out


def order_and_levels(
    nodes: dict[str, NodeRecord], tags: dict[str, str]
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
    label = getattr(node.module, "label", None) if node.kind == "graph" else None
    return label if isinstance(label, str) and label else node.id


def resolve(fb: FlowBuilder) -> tuple[Plan | None, list[str]]:
    """Check the builder's record and resolve it: (plan, []) or (None, every error)."""
    from ._graph import Graph

    errors = list(fb._errors)
    nodes, tags = fb._nodes, fb._tags

    if fb._pending:
        waiting = ", ".join(f"{t!r} (used by {', '.join(ids)})" for t, ids in fb._pending.items())
        errors.append(
            f"build(): unresolved forward refs: {waiting}; tag them later in the chain "
            "or declare them with input([...])"
        )
    if len(fb._streams) > 1:
        errors.append(
            f"build(): open streams: {', '.join(fb._streams)} are still split; "
            "call merge(...) before build()"
        )
    if fb._fork_target is not None:
        pass  # an untagged fork is legal: it runs for its side effects (e.g. BatchNorm stats)
    internal = {t for t in tags if t.startswith("_")}
    for t in fb._internal:
        if t in tags:
            internal.add(t)
        elif t in fb._groups:
            internal.update(fb._groups[t])
        else:
            errors.append(f"internal({t!r}): no such tag; known tags: {sorted(tags) or '(none)'}")

    # Submodule names: the first tag, else a nested graph's label, else the node id.
    names: dict[str, str] = {}
    owner: dict[str, str] = {}
    labels: dict[str, str] = {}
    for nid, node in nodes.items():
        if node.module is None:
            continue
        name = _node_name(node)
        names[nid] = name
        if name in owner:
            errors.append(
                f"{node.call}: submodule name {name!r} is already used by {owner[name]}; "
                "tag one of them differently"
            )
        owner[name] = nid
        if hasattr(Graph, name):
            errors.append(
                f"{node.call}: {name!r} cannot name a submodule, it is an attribute of Graph; "
                "choose another tag"
            )
        if isinstance(node.module, Graph):
            child = node.module
            # Dotted labels never get here: FlowBuilder.label rejects them at the child's build.
            if child.label is not None:
                if child.label in labels:
                    errors.append(
                        f"{node.call}: duplicate child label {child.label!r} "
                        f"(also on {labels[child.label]})"
                    )
                elif child.label in tags and tags[child.label] != nid:
                    errors.append(
                        f"{node.call}: the child label {child.label!r} collides with the tag "
                        f"on {tags[child.label]}"
                    )
                labels[child.label] = nid
            given, wanted = set(node.refs), set(child.input_names)
            if given != wanted:
                errors.append(
                    f"{node.call}: the nested graph takes inputs {sorted(wanted)} but receives "
                    f"refs {sorted(given)}; pass exactly its inputs with .using([...])"
                )

    aux = {name for name, _ in fb._inputs}
    clash = sorted(aux & set(nodes))
    if clash:
        errors.append(f"input({clash[0]!r}): the name collides with a node id; rename it")

    order, levels, stuck = order_and_levels(nodes, tags)
    if stuck:
        errors.append(
            f"build(): cycle detected in graph: {', '.join(stuck)} read each other through "
            "using() refs (a ref cannot read a value computed from its own target; "
            "tag a later value to make it a forward ref instead)"
        )
    if errors:
        return None, errors

    level_of = {nid: i for i, lvl in enumerate(levels) for nid in lvl}
    infos = tuple(
        NodeInfo(
            id=nid,
            name=names.get(nid, nid),
            kind=nodes[nid].kind,
            module=nodes[nid].module,
            tags=tuple(nodes[nid].tags),
            inputs=tuple(nodes[nid].inputs),
            refs=tuple(nodes[nid].refs),
            forward_refs=tuple(r for r in nodes[nid].refs if r in nodes[nid].forward_refs),
            level=level_of[nid],
            internal=bool(nodes[nid].tags) and all(t in internal for t in nodes[nid].tags),
        )
        for nid in order
    )
    state_tags = tuple(t for t in tags if any(t in n.forward_refs for n in nodes.values()))
    plan = Plan(
        nodes=infos,
        levels=tuple(tuple(lvl) for lvl in levels),
        output=fb._streams[0],
        entry=fb._entry,
        input_names=tuple(n for n, _ in fb._inputs),
        input_nodes=tuple(i for _, i in fb._inputs),
        tags=dict(tags),
        tag_groups=dict(fb._groups),
        internal_tags=frozenset(internal),
        state_tags=state_tags,
        label=fb._label,
        options={nid: dict(n.options) for nid, n in nodes.items() if n.options},
    )
    return plan, []
