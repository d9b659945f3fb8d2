"""Loop traces as a graph shows them: ``graph.traces(name)``, ``graph.last_trace(name)`` and
the :class:`LossContext` a loss function reads them from.

A loop whose body derives from :class:`~flodl_graph.nodes.LoopBody` keeps, per call, what the
body published at each iteration. A graph gathers the traces of its loops by name (two loops of
one graph publishing the same name is an error: the name would be ambiguous). A dotted path
reaches a labeled nested graph first: ``"refiner.halt_p"`` is trace ``halt_p`` of the child
graph labeled ``refiner``, as tags are reached through the graph tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from torch import Tensor

from flodl_core import ConfigError, PathError

from .nodes._loop import Loop
from .nodes._traces import LoopBody

if TYPE_CHECKING:
    from ._graph import Graph

__all__ = ["LossContext", "all_traces", "find_last_trace", "find_traces"]


def _loops(graph: Graph) -> list[tuple[str, Loop]]:
    """(node id, loop) of every loop node of ``graph`` whose body publishes traces."""
    return [
        (n.id, n.module)
        for n in graph.nodes
        if isinstance(n.module, Loop) and isinstance(n.module.body, LoopBody)
    ]


def all_traces(graph: Graph) -> dict[str, list[Tensor]]:
    """Every trace of ``graph``'s loops from the last forward: name -> one value per iteration
    that published it (autograd history kept). Nested graphs keep their own."""
    out: dict[str, list[Tensor]] = {}
    owner: dict[str, str] = {}
    for nid, loop in _loops(graph):
        for name, values in loop.traces.items():
            if name in owner:
                raise ConfigError(
                    f"trace {name!r} is published by two loops of graph "
                    f"{graph.label or '(root)'}: {owner[name]} and {nid}; give the loop bodies "
                    "different trace names"
                )
            owner[name] = nid
            out[name] = list(values)
    return out


def _child(graph: Graph, label: str, path: str) -> Graph:
    from ._graph import Graph

    children = {
        n.module.label: n.module
        for n in graph.nodes
        if isinstance(n.module, Graph) and n.module.label is not None
    }
    if label not in children:
        raise PathError(
            f"trace path {path!r}: no child graph {label!r} in graph {graph.label or '(root)'}",
            children,
        )
    return children[label]


def find_traces(graph: Graph, path: str) -> list[Tensor]:
    """The values trace ``path`` took in the last forward, one per iteration that published it.

    ``path``: a trace name, or ``"child.name"`` through labeled nested graphs. An empty list
    when the loops ran no iteration publishing it (or before any forward); a graph with no
    loop whose body is a ``LoopBody`` has no traces at all, which is a :class:`PathError`.
    """
    if not isinstance(path, str) or not path:
        raise ConfigError(f"a trace name must be a non-empty string, got {path!r}")
    *labels, name = path.split(".")
    owner = graph
    for label in labels:
        owner = _child(owner, label, path)
    if not _loops(owner):
        raise PathError(
            f"trace {path!r}: graph {owner.label or '(root)'} has no loop whose body is a "
            "LoopBody, so nothing publishes traces (derive the loop body from "
            "flodl_graph.LoopBody and publish in step(state, refs, emit))"
        )
    return all_traces(owner).get(name, [])


def find_last_trace(graph: Graph, path: str) -> Tensor | None:
    """The value trace ``path`` took at the last iteration publishing it (None if none did)."""
    values = find_traces(graph, path)
    return values[-1] if values else None


@dataclass(frozen=True)
class LossContext:
    """What a loss function may read after a forward: the output, the tagged values and the
    loop traces (all with their autograd history).

    ``LossContext.of(graph, output)`` after ``output = graph(x)``::

        def loss_fn(ctx: LossContext) -> Tensor:
            ponder = torch.stack(ctx.traces["halt_p"]).mean()
            return F.mse_loss(ctx.output, y) + 0.01 * ponder
    """

    output: Tensor
    tags: Mapping[str, Tensor]
    traces: Mapping[str, list[Tensor]]

    @classmethod
    def of(cls, graph: Graph, output: Tensor) -> LossContext:
        """The context of ``graph``'s last forward, which returned ``output``."""
        from ._graph import Graph

        if not isinstance(graph, Graph):
            swapped = " (the arguments are swapped)" if isinstance(output, Graph) else ""
            raise ConfigError(
                f"LossContext.of(graph, output): graph must be a flodl Graph, got "
                f"{type(graph).__name__}{swapped}"
            )
        tags = {t: v for t in graph.tag_names if (v := graph.tagged(t)) is not None}
        return cls(output, MappingProxyType(tags), MappingProxyType(all_traces(graph)))
