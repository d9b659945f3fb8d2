"""``Metrics``: named scalars per batch, one value per epoch, trend queries, across the tree.

Every graph has two, the same class fed by different sources (see ``_observe.py``):

- ``graph.metrics``: tag values of the last forward (``collect``) and numbers from outside
  (``record``: a loss, an accuracy);
- ``graph.timings``: node times in ms of the last profiled forward (``collect``).

``flush`` turns each batch buffer into one epoch value (its arithmetic mean) and recurses into
labeled children, so one call at the end of an epoch flushes the whole tree. ``trend(name)``
answers questions about the history (stalled? improving?) and ``latest()`` lists every value of
the tree under dotted names (what ``graph.latest_metrics()`` gives the monitor).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

from flodl_core import ConfigError, PathError, ShapeError, check_int

from ._observe import Names, Source, metric_name, to_floats, to_names
from ._trend import MetricStore, Reduce, Trend, TrendGroup
from .viz._plot import export_trends_csv, write_plot_html

if TYPE_CHECKING:
    from ._graph import Graph

__all__ = ["Metrics"]

Values = Iterable[float] | torch.Tensor | float


class Metrics:
    """Batch buffers and epoch histories of named scalars of one graph (``graph.metrics``,
    ``graph.timings``). Names are local; dotted paths (``*_at``) reach into subgraphs."""

    def __init__(self, graph: Graph, source: Source, title: str) -> None:
        self._g = graph
        self._source = source
        self._title = title
        self._store = MetricStore()
        self._flushes = 0
        self._elapsed: list[float] = []  # seconds since the clock start, per flush
        self._clock: float | None = None

    def __repr__(self) -> str:
        return f"Metrics({self._source.attr}, known={self._store.known()})"

    def _start_clock(self) -> None:
        # ETA measures from the first observation, not from build (setup time is not an epoch).
        if self._clock is None:
            self._clock = time.perf_counter()

    def _children(self) -> dict[str, Metrics]:
        attr = self._source.attr
        return {label: getattr(child, attr) for label, child in self._g.children.items()}

    # --- batch level ------------------------------------------------------------------------

    def collect(self, names: Names = ()) -> None:
        """Buffer one value per name from the last forward: each tag's scalar value (tag groups
        expanded) for ``graph.metrics``; each node's time (every timed node when ``names`` is
        empty) for ``graph.timings``."""
        self._collect(names, None)

    def collect_with(self, names: Names, reduce: Reduce) -> None:
        """Buffer each tag's value reduced to one number (``Reduce.MEAN/SUM/MAX/MIN/NORM``)."""
        if not isinstance(reduce, Reduce):
            raise ConfigError(f"collect_with: reduce must be a Reduce member, got {reduce!r}")
        self._collect(names, reduce)

    def _collect(self, names: Names, reduce: Reduce | None) -> None:
        self._start_clock()
        for name, value in self._source.sample(self._source.expand(to_names(names)), reduce):
            self._store.add(name, [value])

    def record(self, name: str, values: Values) -> None:
        """Buffer values from outside (a loss, an accuracy) under ``name``."""
        self._start_clock()
        self._store.add(metric_name(name), to_floats(name, values))

    def record_scalar(self, name: str, value: float | torch.Tensor) -> None:
        """Buffer one value from outside under ``name``."""
        vals = to_floats(name, value)
        if len(vals) != 1:
            raise ShapeError(f"record_scalar({name!r}, ...): expected one value, got {len(vals)}")
        self.record(name, vals)

    def collected(self, name: str) -> list[float]:
        """The raw batch buffer of ``name`` since the last flush."""
        return list(self._store.batch.get(name, ()))

    # --- epoch level ------------------------------------------------------------------------

    def flush(self, names: Names = ()) -> None:
        """Mean of each batch buffer into the epoch history, here and in every labeled child.

        ``names`` (groups expanded) limits what this graph flushes; children flush all.
        """
        self._flush_tree(self._source.expand(to_names(names)))

    def _flush_tree(self, names: list[str]) -> bool:
        # A flush that moved values anywhere in the tree is an epoch for this graph too.
        flushed = self._store.flush(names)
        for child in self._children().values():
            flushed = child._flush_tree([]) or flushed
        if flushed:
            self._count_flush()
        return flushed

    def _count_flush(self) -> None:
        self._flushes += 1
        self._start_clock()
        assert self._clock is not None
        self._elapsed.append(time.perf_counter() - self._clock)

    def flush_local(self, names: Names = ()) -> None:
        """Like :meth:`flush` for this graph only (children keep their buffers)."""
        if self._store.flush(self._source.expand(to_names(names))):
            self._count_flush()

    @property
    def flush_count(self) -> int:
        """How many flushes moved at least one value into a history (the epochs seen)."""
        return self._flushes

    def eta(self, total_epochs: int) -> float:
        """Seconds left: mean time per flushed epoch times the epochs remaining (0.0 before
        the first flush or when done)."""
        total = check_int(total_epochs, "total_epochs", ge=0, where="eta")
        if self._flushes == 0:
            return 0.0
        remaining = max(total - self._flushes, 0)
        return self._elapsed[-1] / self._flushes * remaining

    def trend(self, name: str) -> Trend:
        """The epoch history of ``name`` (empty until its first flush)."""
        store = self._store
        if name not in store.batch and name not in store.history:
            known = self._source.known()
            if name not in known:
                # latest() lists a subgraph's names dotted; trend() reads this graph's only.
                dotted = isinstance(name, str) and "." in name
                hint = f"; for a subgraph's, use trend_at({name!r})" if dotted else ""
                where = f"graph {self._g.label!r}" if self._g.label else "this graph"
                raise PathError(
                    f"trend: no {self._source.noun} named {name!r} in {where}{hint}",
                    {*store.known(), *known},
                )
        return Trend(store.history.get(name, ()), name)

    def trends(self, names: Names) -> TrendGroup:
        """Trends of several names (groups expanded), queried together."""
        return TrendGroup({n: self.trend(n) for n in self._source.expand(to_names(names))})

    def reset(self, names: Names = ()) -> None:
        """Forget the epoch history of ``names`` (all of this graph's when empty)."""
        self._store.reset(self._source.expand(to_names(names)))

    def latest(self) -> dict[str, float]:
        """Last epoch value of every name in the tree; children's under ``label.`` prefixes."""
        out = self._store.latest()
        for label, child in self._children().items():
            out.update({f"{label}.{k}": v for k, v in child.latest().items()})
        return out

    def latest_local(self) -> dict[str, float]:
        """Last epoch value of this graph's own names."""
        return self._store.latest()

    # --- across the tree -------------------------------------------------------------------

    def _owner_of(self, path: str) -> tuple[Metrics, str]:
        """(metrics, last segment) for ``a.b.name``: every segment but the last is a subgraph."""
        if not isinstance(path, str):
            raise ConfigError(f"a metric path must be a string, got {type(path).__name__}")
        if "." not in path:
            return self, metric_name(path)
        head, _, last = path.rpartition(".")
        if not last:
            raise PathError(f"path {path!r} ends with '.'; expected 'subgraph.metric'")
        return getattr(self._g.tree.subgraph(head), self._source.attr), last

    def record_at(self, path: str, values: Values) -> None:
        """``record`` into the subgraph named by all but the last segment of ``path``."""
        self._start_clock()
        owner, name = self._owner_of(path)
        owner.record(name, values)

    def collect_at(self, paths: Names) -> None:
        """``collect`` each dotted path in the graph that owns it (internal tags are refused)."""
        self._start_clock()
        for path in to_names(paths):
            g, name = self._source.locate(path)
            getattr(g, self._source.attr).collect(name)

    def trend_at(self, path: str) -> Trend:
        """``trend`` of the name at ``path`` (``encoder.scan.loss``)."""
        owner, name = self._owner_of(path)
        return owner.trend(name)

    # --- exports ---------------------------------------------------------------------------

    def histories(self, names: Names = ()) -> dict[str, list[float]]:
        """Epoch histories: every name of the tree (dotted below the root) when ``names`` is
        empty, else the named ones (dotted paths reach into subgraphs)."""
        wanted = to_names(names)
        if wanted:
            return {n: self.trend_at(n).values() for n in wanted}
        out = self._store.histories()
        for label, child in self._children().items():
            out.update({f"{label}.{k}": v for k, v in child.histories().items()})
        return out

    def plot_html(
        self, path: str | os.PathLike[str], names: Names = (), title: str | None = None
    ) -> None:
        """Write a self-contained HTML page of epoch curves (every name of the tree when
        ``names`` is empty)."""
        if title is not None and not isinstance(title, str):
            raise ConfigError(
                f"{self._source.attr}.plot_html: title must be a str, got {type(title).__name__}"
            )
        series = {k: v for k, v in self.histories(names).items() if v}
        if not series:
            raise ConfigError(
                f"{self._source.attr}.plot_html: nothing has been flushed yet; call flush() "
                "each epoch"
            )
        write_plot_html(path, series, title or self._title)

    def export_csv(self, path: str | os.PathLike[str], names: Names = ()) -> None:
        """Write epoch histories as CSV: ``epoch`` then one column per name."""
        series = self.histories(names)
        if not any(series.values()):
            raise ConfigError(
                f"{self._source.attr}.export_csv: nothing has been flushed yet; call flush() "
                "each epoch"
            )
        export_trends_csv(path, series)
