"""Visualization methods (mixed into :class:`Graph`): DOT, SVG, profiling, timing trends."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Literal

from flodl_core import ConfigError, PathError

from .._trend import MetricStore, Trend, TrendGroup
from ._dot import graphviz_svg, render_dot
from ._files import write_text_atomic
from ._graph_scene import graph_scene
from ._plot import export_trends_csv, write_plot_html
from ._profile import Profile
from ._scene import Scene
from ._svg import render_svg

if TYPE_CHECKING:
    from .._graph import Graph

__all__ = ["Engine", "VizMixin"]

Engine = Literal["auto", "graphviz", "builtin"]


def _names(names: str | Iterable[str]) -> list[str]:
    return [names] if isinstance(names, str) else list(names)


class VizMixin:
    """Visualization features of a :class:`~flodl_graph.Graph`."""

    def _init_viz(self) -> None:
        self._timings = MetricStore()

    # --- diagrams --------------------------------------------------------------------------

    def dot(self: Graph) -> str:
        """Graphviz DOT source of the graph: one dashed cluster per topological level."""
        return render_dot(graph_scene(self))

    def dot_with_profile(self: Graph) -> str:
        """DOT with nodes heat-coloured by the last profiled forward's timings."""
        return render_dot(graph_scene(self, self._require_profile("dot_with_profile")))

    def svg(
        self: Graph, path: str | os.PathLike[str] | None = None, engine: Engine = "auto"
    ) -> str:
        """The architecture diagram as SVG text (also written to ``path`` when given).

        ``engine="auto"`` uses Graphviz ``dot`` when it is on PATH and the built-in layered
        layout otherwise, so this always works; ``"graphviz"``/``"builtin"`` force one.
        """
        return self._emit_svg(graph_scene(self), path, engine)

    def svg_with_profile(
        self: Graph, path: str | os.PathLike[str] | None = None, engine: Engine = "auto"
    ) -> str:
        """Like :meth:`svg`, heat-coloured by the last profiled forward (green fast, red slow)."""
        return self._emit_svg(
            graph_scene(self, self._require_profile("svg_with_profile")), path, engine
        )

    def _emit_svg(self, scene: Scene, path: str | os.PathLike[str] | None, engine: str) -> str:
        if engine not in ("auto", "graphviz", "builtin"):
            raise ConfigError(f"svg engine must be 'auto', 'graphviz' or 'builtin', got {engine!r}")
        use_dot = engine == "graphviz" or (engine == "auto" and shutil.which("dot") is not None)
        text = graphviz_svg(render_dot(scene)) if use_dot else render_svg(scene)
        if path is not None:
            write_text_atomic(path, text)
        return text

    # --- profiling -------------------------------------------------------------------------

    def enable_profiling(self: Graph) -> None:
        """Time every node and level of each forward from now on."""
        self._set_profiling(True)

    def disable_profiling(self: Graph) -> None:
        """Stop timing forwards (the default)."""
        self._set_profiling(False)

    def profile(self: Graph) -> Profile | None:
        """Timings of the last profiled forward, or None when there is none."""
        node_ns = dict(self._node_times or {})
        if not node_ns:
            return None
        raw = self._level_times or ()
        n_levels = len(self.levels)
        if isinstance(raw, Mapping):
            level_ns = [int(raw.get(i, 0)) for i in range(n_levels)]
        else:
            level_ns = [int(v) for v in raw]
        names = {n.id: n.name for n in self.nodes}
        return Profile(node_ns, level_ns, [tuple(lv) for lv in self.levels], names)

    def _require_profile(self: Graph, what: str) -> Profile:
        prof = self.profile()
        if prof is None:
            raise ConfigError(
                f"{what}: no timings yet; call enable_profiling() and run a forward first"
            )
        return prof

    # --- timing trends ---------------------------------------------------------------------

    def collect_timings(self: Graph, names: str | Iterable[str] = ()) -> None:
        """Buffer the last forward's node times in milliseconds, by node name (first tag,
        label or id); every timed node when ``names`` is empty."""
        prof = self._require_profile("collect_timings")
        by_name = {n.name: n.id for n in self.nodes}
        wanted = _names(names) or [prof.names.get(i, i) for i in prof.node_ns]
        for name in wanted:
            nid = by_name.get(name)
            if nid is None:
                raise PathError(f"collect_timings: no node named {name!r}", by_name)
            if nid in prof.node_ns:
                self._timings.add(name, [prof.node_ns[nid] / 1e6])

    def flush_timings(self: Graph, names: str | Iterable[str] = ()) -> None:
        """Mean of each timing buffer into its epoch history."""
        self._timings.flush(_names(names))

    def timing_trend(self: Graph, name: str) -> Trend:
        """Epoch history of a node's time (ms)."""
        if name not in self._timings.history and name not in self._timings.batch:
            raise PathError(f"timing_trend: no timings for {name!r}", self._timings.known())
        return Trend(self._timings.history.get(name, ()), name)

    def timing_trends(self: Graph, names: str | Iterable[str]) -> TrendGroup:
        """Timing trends of several nodes, queried together."""
        return TrendGroup({n: self.timing_trend(n) for n in _names(names)})

    def reset_timing_trend(self: Graph, names: str | Iterable[str] = ()) -> None:
        """Forget timing histories (all when ``names`` is empty)."""
        self._timings.reset(_names(names))

    def plot_timings_html(
        self: Graph, path: str | os.PathLike[str], names: str | Iterable[str] = ()
    ) -> None:
        """Self-contained HTML of per-node time per epoch ("Timing Trends")."""
        series = {k: v for k, v in self._timings.histories(_names(names)).items() if v}
        if not series:
            raise ConfigError("plot_timings_html: no timings flushed yet; call flush_timings()")
        write_plot_html(path, series, "Timing Trends")

    def export_timing_trends(
        self: Graph, path: str | os.PathLike[str], names: str | Iterable[str] = ()
    ) -> None:
        """Timing histories as CSV (``epoch`` then one column per node, in ms)."""
        series = self._timings.histories(_names(names))
        if not any(series.values()):
            raise ConfigError("export_timing_trends: no timings flushed yet")
        export_trends_csv(path, series)
