"""Where a graph's observations come from: tags of the last forward, or its node timings.

:class:`~flodl_graph._metrics.Metrics` is one class used twice on every graph; a source tells it
what ``collect`` reads and which names exist before any value was recorded:

- :class:`TagSource` (``graph.metrics``): tag values of the last forward, tag groups expanded;
- :class:`TimingSource` (``graph.timings``): node times in milliseconds from the last profiled
  forward (``enable_profiling()``), by node name (first tag, label or id).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

import torch

from flodl_core import ConfigError, PathError, ShapeError

from ._tree import PathKind, resolve_path
from ._trend import Reduce

if TYPE_CHECKING:
    from ._graph import Graph

__all__ = ["Names", "Source", "TagSource", "TimingSource", "metric_name", "to_floats", "to_names"]

Names = str | Iterable[str]


def to_names(names: Names) -> list[str]:
    """``"a"`` or ``["a", "b"]`` -> a list of names, each checked to be a string."""
    if isinstance(names, str):
        return [names]
    if not isinstance(names, Iterable):
        raise ConfigError(
            f"expected a metric or tag name or a list of them, got {type(names).__name__} {names!r}"
        )
    out = list(names)
    for t in out:
        if not isinstance(t, str):
            raise ConfigError(f"metric and tag names must be strings, got {t!r}")
    return out


def to_floats(name: str, values: object) -> list[float]:
    """A number, a sequence of numbers or a tensor -> a list of floats."""
    if isinstance(values, torch.Tensor):
        return [float(v) for v in values.detach().reshape(-1).tolist()]
    if isinstance(values, numbers.Real):  # int, float, numpy scalars
        return [float(values)]
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ConfigError(
            f"record({name!r}, ...): expected a number, numbers or a tensor, got "
            f"{type(values).__name__}"
        )
    out: list[float] = []
    for v in values:
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            out.append(float(v.item()))
        elif isinstance(v, numbers.Real):
            out.append(float(v))
        else:
            raise ConfigError(f"record({name!r}, ...): {v!r} is not a number")
    return out


def metric_name(name: object) -> str:
    """``name`` when it is a valid local metric name (non-empty, no dot)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"a metric name must be a non-empty string, got {name!r}")
    if "." in name:
        raise ConfigError(
            f"metric name {name!r} contains '.'; record into a subgraph with "
            f"record_at({name!r}, ...)"
        )
    return name


class Source(Protocol):
    """What a :class:`~flodl_graph._metrics.Metrics` collects from."""

    #: The graph attribute holding the Metrics fed by this source (children are reached by it).
    attr: str
    #: What an unknown name is called in errors ("metric or tag", "timing").
    noun: str

    def expand(self, names: list[str]) -> list[str]:
        """Names as given, groups expanded, in order, duplicates dropped."""
        ...

    def known(self) -> list[str]:
        """Names that exist before any value (a tag, a node): their trend is empty, not an
        error."""
        ...

    def sample(self, names: list[str], reduce: Reduce | None) -> list[tuple[str, float]]:
        """One value per name (names already expanded) from the last forward."""
        ...

    def locate(self, path: str) -> tuple[Graph, str]:
        """(graph owning it, local name) for a dotted ``collect_at`` path."""
        ...


class TagSource:
    """Tag values of the last forward (``graph.metrics``)."""

    attr = "metrics"
    noun = "metric or tag"

    __slots__ = ("_g",)

    def __init__(self, graph: Graph) -> None:
        self._g = graph

    def expand(self, names: list[str]) -> list[str]:
        out: list[str] = []
        groups = self._g.tag_groups
        for t in names:
            for name in groups.get(t, (t,)):
                if name not in out:
                    out.append(name)
        return out

    def known(self) -> list[str]:
        return list(self._g.tag_names)

    def sample(self, names: list[str], reduce: Reduce | None) -> list[tuple[str, float]]:
        g = self._g
        known = set(g.tag_names)
        out: list[tuple[str, float]] = []
        for tag in names:
            if tag not in known:
                raise PathError(
                    f"collect: no tag named {tag!r} in this graph", [*g.tag_names, *g.tag_groups]
                )
            value = g.tagged(tag)
            if value is None:  # not produced by the last forward (e.g. an unselected branch)
                continue
            if not isinstance(value, torch.Tensor):
                raise ConfigError(
                    f"collect: tag {tag!r} holds a {type(value).__name__}, expected a tensor"
                )
            if reduce is not None:
                out.append((tag, reduce.apply(value, f"collect_with: tag {tag!r}")))
            elif value.numel() != 1:
                raise ShapeError(
                    f"collect: tag {tag!r} holds a tensor of shape {tuple(value.shape)}, "
                    f"expected a single value; use collect_with([{tag!r}], Reduce.MEAN)"
                )
            else:
                out.append((tag, float(value.detach().item())))
        return out

    def locate(self, path: str) -> tuple[Graph, str]:
        # Through the tree's rules, so a tag internal to a subgraph is refused from outside.
        g, kind, name = resolve_path(self._g, path)
        if kind is not PathKind.TAG:
            raise PathError(f"collect_at: path {path!r} names a subgraph, expected a tag")
        return g, name


class TimingSource:
    """Node times (ms) of the last profiled forward (``graph.timings``)."""

    attr = "timings"
    noun = "timing"

    __slots__ = ("_g",)

    def __init__(self, graph: Graph) -> None:
        self._g = graph

    def expand(self, names: list[str]) -> list[str]:
        return list(dict.fromkeys(names))

    def known(self) -> list[str]:
        return [n.name for n in self._g.nodes]

    def sample(self, names: list[str], reduce: Reduce | None) -> list[tuple[str, float]]:
        if reduce is not None:
            raise ConfigError(
                "timings.collect_with: a node time is already one number; use timings.collect()"
            )
        prof = self._g.viz.profile()
        if prof is None:
            raise ConfigError(f"collect_timings: {self._g.viz.why_no_profile()}")
        by_name = {n.name: n.id for n in self._g.nodes}
        wanted = names or [prof.names.get(i, i) for i in prof.node_ns]
        out: list[tuple[str, float]] = []
        for name in wanted:
            nid = by_name.get(name)
            if nid is None:
                raise PathError(f"collect_timings: no node named {name!r}", by_name)
            if nid in prof.node_ns:
                out.append((name, prof.node_ns[nid] / 1e6))
        return out

    def locate(self, path: str) -> tuple[Graph, str]:
        head, _, last = path.rpartition(".")
        return (self._g.tree.subgraph(head) if head else self._g), last
