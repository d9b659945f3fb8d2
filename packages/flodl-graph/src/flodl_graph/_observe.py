"""Observation: collect, record, flush, trends (mixed into :class:`Graph`).

Each graph keeps per-batch buffers and per-epoch histories of named scalars. Values come from
tags of the last forward (``collect``/``collect_with``) or from outside (``record``,
``record_scalar``: a loss, an accuracy). ``flush`` turns each buffer into one epoch value (its
arithmetic mean) and recurses into labeled children, so one call at the end of an epoch flushes
the whole tree. ``trend(tag)`` then answers questions about the history (stalled? improving?),
and ``latest_metrics()`` lists every metric of the tree under dotted names for the monitor.
"""

from __future__ import annotations

import numbers
import os
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch

from flodl_core import ConfigError, PathError, ShapeError

from ._tree import PathKind, resolve_path
from ._trend import MetricStore, Reduce, Trend, TrendGroup
from .viz._plot import export_trends_csv, write_plot_html

if TYPE_CHECKING:
    from ._graph import Graph

__all__ = ["ObserveMixin"]

Names = str | Iterable[str]


def _names(tags: Names) -> list[str]:
    """``"a"`` or ``["a", "b"]`` -> a list of names, each checked to be a string."""
    if isinstance(tags, str):
        return [tags]
    out = list(tags)
    for t in out:
        if not isinstance(t, str):
            raise ConfigError(f"metric and tag names must be strings, got {t!r}")
    return out


def _floats(tag: str, values: object) -> list[float]:
    """A number, a sequence of numbers or a tensor -> a list of floats."""
    if isinstance(values, torch.Tensor):
        return [float(v) for v in values.detach().reshape(-1).tolist()]
    if isinstance(values, numbers.Real):  # int, float, numpy scalars
        return [float(values)]
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise ConfigError(
            f"record({tag!r}, ...): expected a number, numbers or a tensor, got "
            f"{type(values).__name__}"
        )
    out: list[float] = []
    for v in values:
        if isinstance(v, torch.Tensor) and v.numel() == 1:
            out.append(float(v.item()))
        elif isinstance(v, numbers.Real):
            out.append(float(v))
        else:
            raise ConfigError(f"record({tag!r}, ...): {v!r} is not a number")
    return out


def _metric_name(tag: object) -> str:
    if not isinstance(tag, str) or not tag:
        raise ConfigError(f"a metric name must be a non-empty string, got {tag!r}")
    if "." in tag:
        raise ConfigError(
            f"metric name {tag!r} contains '.'; record into a subgraph with record_at({tag!r}, ...)"
        )
    return tag


class ObserveMixin:
    """Observation features of a :class:`~flodl_graph.Graph`."""

    def _init_observe(self) -> None:
        self._metrics = MetricStore()
        self._flush_count = 0
        self._flush_elapsed: list[float] = []  # seconds since the clock start, per flush
        self._observe_start: float | None = None

    def _start_clock(self) -> None:
        # ETA measures from the first observation, not from build (setup time is not an epoch).
        if self._observe_start is None:
            self._observe_start = time.perf_counter()

    def _expand(self: Graph, tags: Names) -> list[str]:
        """Tag names with tag groups expanded, in order, duplicates dropped."""
        out: list[str] = []
        groups = self.tag_groups
        for t in _names(tags):
            for name in groups.get(t, (t,)):
                if name not in out:
                    out.append(name)
        return out

    # --- batch level ------------------------------------------------------------------------

    def _collect(self: Graph, tags: Names, reduce: Reduce | None) -> None:
        self._start_clock()
        known = set(self.tag_names)
        for tag in self._expand(tags):
            if tag not in known:
                raise PathError(
                    f"collect: no tag named {tag!r} in this graph",
                    [*self.tag_names, *self.tag_groups],
                )
            value = self.tagged(tag)
            if value is None:  # not produced by the last forward (e.g. an unselected branch)
                continue
            if not isinstance(value, torch.Tensor):
                raise ConfigError(
                    f"collect: tag {tag!r} holds a {type(value).__name__}, expected a tensor"
                )
            if reduce is None:
                if value.numel() != 1:
                    raise ShapeError(
                        f"collect: tag {tag!r} holds a tensor of shape {tuple(value.shape)}, "
                        f"expected a single value; use collect_with([{tag!r}], Reduce.MEAN)"
                    )
                self._metrics.add(tag, [float(value.detach().item())])
            else:
                self._metrics.add(tag, [reduce.apply(value, f"collect_with: tag {tag!r}")])

    def collect(self: Graph, tags: Names) -> None:
        """Buffer the scalar value of each tag (or tag group) from the last forward."""
        self._collect(tags, None)

    def collect_with(self: Graph, tags: Names, reduce: Reduce) -> None:
        """Buffer each tag's value reduced to one number (``Reduce.MEAN/SUM/MAX/MIN/NORM``)."""
        if not isinstance(reduce, Reduce):
            raise ConfigError(f"collect_with: reduce must be a Reduce member, got {reduce!r}")
        self._collect(tags, reduce)

    def record(self: Graph, tag: str, values: Iterable[float] | torch.Tensor | float) -> None:
        """Buffer external values (a loss, an accuracy) under ``tag``."""
        self._start_clock()
        self._metrics.add(_metric_name(tag), _floats(tag, values))

    def record_scalar(self: Graph, tag: str, value: float | torch.Tensor) -> None:
        """Buffer one external value under ``tag``."""
        vals = _floats(tag, value)
        if len(vals) != 1:
            raise ShapeError(f"record_scalar({tag!r}, ...): expected one value, got {len(vals)}")
        self.record(tag, vals)

    def collected(self: Graph, tag: str) -> list[float]:
        """The raw batch buffer of ``tag`` since the last flush."""
        return list(self._metrics.batch.get(tag, ()))

    # --- epoch level ------------------------------------------------------------------------

    def flush(self: Graph, tags: Names = ()) -> None:
        """Mean of each batch buffer into the epoch history, here and in every labeled child.

        ``tags`` (tag groups expanded) limits what this graph flushes; children flush all.
        """
        self._flush_tree(self._expand(tags))

    def _flush_tree(self: Graph, tags: list[str]) -> bool:
        flushed = self._metrics.flush(tags)
        for child in self.children.values():
            flushed = child._flush_tree([]) or flushed
        if flushed:
            self._flush_count += 1
            self._start_clock()
            assert self._observe_start is not None
            self._flush_elapsed.append(time.perf_counter() - self._observe_start)
        return flushed

    def flush_local(self: Graph, tags: Names = ()) -> None:
        """Like :meth:`flush` for this graph only (children keep their buffers)."""
        if self._metrics.flush(self._expand(tags)):
            self._flush_count += 1
            self._start_clock()
            assert self._observe_start is not None
            self._flush_elapsed.append(time.perf_counter() - self._observe_start)

    def _known_metric(self: Graph, tag: str, what: str) -> None:
        if tag in self._metrics.batch or tag in self._metrics.history or tag in self.tag_names:
            return
        raise PathError(
            f"{what}: no metric or tag named {tag!r} in this graph",
            [*self._metrics.known(), *self.tag_names],
        )

    def trend(self: Graph, tag: str) -> Trend:
        """The epoch history of ``tag`` (empty until its first flush)."""
        self._known_metric(tag, "trend")
        return Trend(self._metrics.history.get(tag, ()), tag)

    def trends(self: Graph, tags: Names) -> TrendGroup:
        """Trends of several tags (tag groups expanded), queried together."""
        return TrendGroup({t: self.trend(t) for t in self._expand(tags)})

    def reset_trend(self: Graph, tags: Names = ()) -> None:
        """Forget the epoch history of ``tags`` (all of this graph's when empty)."""
        self._metrics.reset(self._expand(tags))

    def latest_metrics(self: Graph) -> dict[str, float]:
        """Last epoch value of every metric in the tree; children's under ``label.`` prefixes."""
        out = self._metrics.latest()
        for label, child in self.children.items():
            out.update({f"{label}.{k}": v for k, v in child.latest_metrics().items()})
        return out

    def latest_metrics_local(self: Graph) -> dict[str, float]:
        """Last epoch value of this graph's own metrics."""
        return self._metrics.latest()

    @property
    def flush_count(self) -> int:
        """How many flushes moved at least one value into a history (the epochs seen)."""
        return self._flush_count

    def eta(self, total_epochs: int) -> float:
        """Seconds left: mean time per flushed epoch times the epochs remaining (0.0 before
        the first flush or when done)."""
        if isinstance(total_epochs, bool) or not isinstance(total_epochs, int) or total_epochs < 0:
            raise ConfigError(f"eta: total_epochs must be an int >= 0, got {total_epochs!r}")
        if self._flush_count == 0:
            return 0.0
        remaining = max(total_epochs - self._flush_count, 0)
        return self._flush_elapsed[-1] / self._flush_count * remaining

    # --- across the tree -------------------------------------------------------------------

    def _owner_of(self: Graph, path: str) -> tuple[Graph, str]:
        """(graph, last segment) for ``a.b.metric``: every segment but the last is a subgraph."""
        if not isinstance(path, str):
            raise ConfigError(f"a metric path must be a string, got {type(path).__name__}")
        if "." not in path:
            return self, _metric_name(path)
        head, _, last = path.rpartition(".")
        if not last:
            raise PathError(f"path {path!r} ends with '.'; expected 'subgraph.metric'")
        return self.subgraph(head), last

    def record_at(self: Graph, path: str, values: Iterable[float] | torch.Tensor | float) -> None:
        """``record`` into the subgraph named by all but the last segment of ``path``."""
        self._start_clock()
        g, name = self._owner_of(path)
        g.record(name, values)

    def collect_at(self: Graph, paths: Names) -> None:
        """``collect`` each tag path in the graph that owns it (internal tags are refused)."""
        self._start_clock()
        for path in _names(paths):
            g, kind, name = resolve_path(self, path)
            if kind is not PathKind.TAG:
                raise PathError(f"collect_at: path {path!r} names a subgraph, expected a tag")
            g.collect(name)

    def trend_at(self: Graph, path: str) -> Trend:
        """``trend`` of the metric at ``path`` (``encoder.scan.loss``)."""
        g, name = self._owner_of(path)
        return g.trend(name)

    def tagged_at(self: Graph, path: str) -> torch.Tensor | None:
        """The last forward's value of the tag at ``path``; None if it was not computed."""
        g, kind, name = resolve_path(self, path)
        if kind is not PathKind.TAG:
            raise PathError(f"tagged_at: path {path!r} names a subgraph, expected a tag")
        return g.tagged(name)

    # --- exports ---------------------------------------------------------------------------

    def _tree_histories(self: Graph, tags: Names) -> dict[str, list[float]]:
        names = _names(tags)
        if not names:
            out = self._metrics.histories()
            for label, child in self.children.items():
                out.update({f"{label}.{k}": v for k, v in child._tree_histories(()).items()})
            return out
        return {n: self.trend_at(n).values() for n in names}

    def plot_html(
        self: Graph, path: str | os.PathLike[str], tags: Names = (), title: str = "Training trends"
    ) -> None:
        """Write a self-contained HTML page of epoch curves (all metrics of the tree when
        ``tags`` is empty; dotted paths reach into subgraphs)."""
        series = {k: v for k, v in self._tree_histories(tags).items() if v}
        if not series:
            raise ConfigError("plot_html: nothing has been flushed yet; call flush() each epoch")
        write_plot_html(path, series, title)

    def export_trends(self: Graph, path: str | os.PathLike[str], tags: Names = ()) -> None:
        """Write epoch histories as CSV: ``epoch`` then one column per metric."""
        series = self._tree_histories(tags)
        if not any(series.values()):
            raise ConfigError(
                "export_trends: nothing has been flushed yet; call flush() each epoch"
            )
        export_trends_csv(path, series)
