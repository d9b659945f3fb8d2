"""From a built graph's plan (``graph.nodes``, ``graph.levels``) to a styled :class:`Scene`.

Node style follows the node's role: graph inputs and the output are house shapes, joins
(``add``/``merge``) circles, loops 3-D boxes, routers (``gate``/``switch``) diamonds, ``map``
a parallelogram, nested graphs a tab; plain modules are ellipses for activations, green boxes
for normalizations and grey boxes otherwise; a merge is labeled with its operation. ``using``
edges are dashed blue and labeled with the ref; forward-reference state edges (value carried
from the previous call) dotted orange.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from torch import nn

from ._profile import Profile, format_ns
from ._scene import Scene, SceneEdge, SceneNode, Shape, heat_color

if TYPE_CHECKING:
    from .._graph import Graph
    from .._spec import NodeInfo

__all__ = ["graph_scene", "node_style", "param_count_label"]

REF_COLOR = "#2980b9"
STATE_COLOR = "#e67e22"
STREAM_COLOR = "#555555"

_KIND_STYLE: dict[str, tuple[Shape, str]] = {
    "input": ("invhouse", "#aed6f1"),
    "add": ("circle", "#d5dbdb"),
    "merge": ("circle", "#d5dbdb"),
    "map": ("parallelogram", "#a9cce3"),
    "loop": ("box3d", "#d7bde2"),
    "gate": ("diamond", "#f5cba7"),
    "switch": ("diamond", "#f5cba7"),
    "graph": ("tab", "#fcf3cf"),
}
_ACTIVATION_MODULES = ("torch.nn.modules.activation", "flodl_core.nn._activations")
_DIGITS = re.compile(r"_\d+$")


def _is_activation(m: nn.Module) -> bool:
    return type(m).__module__ in _ACTIVATION_MODULES


def _is_norm(m: nn.Module) -> bool:
    name = type(m).__name__
    return "Norm" in name or type(m).__module__.startswith(
        (
            "torch.nn.modules.normalization",
            "torch.nn.modules.batchnorm",
            "torch.nn.modules.instancenorm",
        )
    )


def node_style(node: NodeInfo, is_output: bool) -> tuple[Shape, str]:
    """(shape, fill) of one node."""
    if is_output:
        return ("doubleoctagon", "#a9dfbf") if node.kind == "input" else ("house", "#a9dfbf")
    if node.kind in _KIND_STYLE:
        return _KIND_STYLE[node.kind]
    m = node.module
    if m is not None and _is_activation(m):
        return "ellipse", "#fdebd0"
    if m is not None and _is_norm(m):
        return "box", "#d5f5e3"
    return "box", "#eaecee"


def param_count_label(n: int) -> str:
    """``"840 params"``, ``"1.2K params"``, ``"3.4M params"``; empty for zero."""
    if n <= 0:
        return ""
    if n < 1_000:
        return f"{n} params"
    if n < 1_000_000:
        return f"{n / 1e3:.1f}K params"
    return f"{n / 1e6:.1f}M params"


def _merge_op(g: Graph, node: NodeInfo) -> str:
    """The operation a ``merge`` node joins its streams with (``"add"``, ``"mean"``)."""
    op = g._plan.options[node.id]["op"]
    return str(getattr(op, "value", op))


def _label(g: Graph, node: NodeInfo, profile: Profile | None) -> str:
    lines = [_DIGITS.sub("", node.id) or node.id]
    if node.kind == "merge":
        lines.append(_merge_op(g, node))  # a sum and a mean look alike otherwise
    if node.kind == "graph" and node.module is not None:
        sub = node.module
        title = getattr(sub, "label", None)
        lines = [f"{title or 'graph'} [{sub.short_hash()}]"]  # type: ignore[operator]
    if node.tags:
        lines.append(" ".join(f"#{t}" for t in node.tags))
    if node.module is not None:
        pc = param_count_label(sum(p.numel() for p in node.module.parameters()))
        if pc:
            lines.append(pc)
    if profile is not None and node.id in profile.node_ns:
        lines.append(format_ns(profile.node_ns[node.id]))
    return "\n".join(lines)


def graph_scene(g: Graph, profile: Profile | None = None) -> Scene:
    """The scene of ``g``; with ``profile``, nodes are heat-coloured by their time."""
    nodes = g.nodes
    output = g.output_node.id
    by_id = {n.id: n for n in nodes}
    tag_owner = {t: n.id for n in nodes for t in n.tags}
    hottest = max(profile.node_ns.values(), default=0) if profile is not None else 0
    scene = Scene(title=g.label or "G")
    for n in nodes:
        shape, fill = node_style(n, n.id == output)
        if profile is not None and hottest > 0 and n.id in profile.node_ns:
            fill = heat_color(profile.node_ns[n.id] / hottest)
        kind = f"merge: {_merge_op(g, n)}" if n.kind == "merge" else n.kind
        tooltip = f"{n.id} ({kind})" + (f": {type(n.module).__name__}" if n.module else "")
        scene.nodes.append(SceneNode(n.id, _label(g, n, profile), n.level, shape, fill, tooltip))
    for n in nodes:
        for src in n.inputs:
            if src in by_id:
                scene.edges.append(SceneEdge(src, n.id, color=STREAM_COLOR))
        for ref in n.refs:
            src = tag_owner.get(ref)
            if src is None:
                continue
            if ref in n.forward_refs:
                scene.edges.append(
                    SceneEdge(src, n.id, "dotted", STATE_COLOR, "state", constraint=False)
                )
            else:
                scene.edges.append(SceneEdge(src, n.id, "dashed", REF_COLOR, ref))
    for i in range(len(g.levels)):
        cap = f"level {i}"
        if profile is not None and i < len(profile.level_ns):
            cap += f"  {format_ns(profile.level_ns[i])}  x{profile.parallelism(i):.2f}"
        scene.level_labels[i] = cap
    return scene
