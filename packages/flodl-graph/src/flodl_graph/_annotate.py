"""Naming the node behind an exception raised inside a built graph's forward.

The generated forward wraps its statements in one ``try`` block whose handler calls
:func:`note_failure` and re-raises the same exception: nothing runs on the success path. The note
says which node failed, what it is and the shapes it received, e.g.::

    in graph 'mlp', node 'linear_3' (Linear(in_features=4, out_features=1), submodule 'head'):
    inputs relu_2: [3, 5] float32; see graph.code for the generated forward
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ._graph import Graph


def _value(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"{list(v.shape)} {str(v.dtype).removeprefix('torch.')}"
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_value(x) for x in v) + ")"
    return type(v).__name__


def _module(m: object) -> str:
    if m is None:
        return "no module"
    extra = m.extra_repr() if callable(getattr(m, "extra_repr", None)) else ""
    return f"{type(m).__name__}({extra})"


def describe_failure(graph: Graph, nid: str, frame_locals: dict[str, Any]) -> str:
    """The note for a failure in node ``nid``, reading its inputs from the forward's locals."""
    node = graph._node_index[nid]
    where = f"graph {graph.label!r}" if graph.label else "graph"
    what = [_module(node.module)] if node.kind not in ("add", "merge") else [f"{node.kind} op"]
    if node.module is not None:
        what.append(f"submodule {node.name!r}")
    if node.tags:
        what.append(f"tags {list(node.tags)}")
    args = graph._generated.node_args.get(nid, ())
    shown = ", ".join(
        f"{a}: {_value(frame_locals[a])}" if a in frame_locals else f"{a}: (freed)" for a in args
    )
    return (
        f"in {where}, node {nid!r} ({', '.join(what)}); inputs {shown or '(none)'}; "
        "see graph.code for the generated forward"
    )


def note_failure(graph: Graph, exc: BaseException) -> None:
    """Attach a note naming the failing node to ``exc`` (called from the forward's handler)."""
    code = graph._forward_fn.__code__
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    if tb is None:
        return
    nid = graph._generated.line_nodes.get(tb.tb_lineno)
    if nid is None:
        return
    try:
        exc.add_note(describe_failure(graph, nid, dict(tb.tb_frame.f_locals)))
    except Exception:
        return
