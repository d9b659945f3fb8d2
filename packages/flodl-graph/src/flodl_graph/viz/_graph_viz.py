"""``graph.viz``: DOT and SVG diagrams, and the per-node profiling that heat-colours them."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Literal

from flodl_core import ConfigError

from ._dot import graphviz_svg, render_dot
from ._files import write_text_atomic
from ._graph_scene import graph_scene
from ._profile import Profile
from ._scene import Scene
from ._svg import render_svg

if TYPE_CHECKING:
    from .._graph import Graph

__all__ = ["Engine", "GraphViz"]

Engine = Literal["auto", "graphviz", "builtin"]


class GraphViz:
    """The visualization features of a :class:`~flodl_graph.Graph` (``graph.viz``).

    ``graph.svg(...)``, ``graph.enable_profiling()`` and the other flat names forward here.
    """

    __slots__ = ("_g",)

    def __init__(self, graph: Graph) -> None:
        self._g = graph

    def __repr__(self) -> str:
        return f"GraphViz({self._g.label or '(root)'}, profiling={self.profiling})"

    # --- diagrams --------------------------------------------------------------------------

    def dot(self) -> str:
        """Graphviz DOT source of the graph: one dashed cluster per topological level."""
        return render_dot(graph_scene(self._g))

    def dot_with_profile(self) -> str:
        """DOT with nodes heat-coloured by the last profiled forward's timings."""
        return render_dot(graph_scene(self._g, self._require_profile("dot_with_profile")))

    def svg(self, path: str | os.PathLike[str] | None = None, engine: Engine = "auto") -> str:
        """The architecture diagram as SVG text (also written to ``path`` when given).

        ``engine="auto"`` uses Graphviz ``dot`` when it is on PATH and the built-in layered
        layout otherwise, so this always works; ``"graphviz"``/``"builtin"`` force one.
        """
        return _emit_svg(graph_scene(self._g), path, engine)

    def svg_with_profile(
        self, path: str | os.PathLike[str] | None = None, engine: Engine = "auto"
    ) -> str:
        """Like :meth:`svg`, heat-coloured by the last profiled forward (green fast, red slow),
        each node showing its time and each level its wall time."""
        scene = graph_scene(self._g, self._require_profile("svg_with_profile"))
        return _emit_svg(scene, path, engine)

    # --- profiling -------------------------------------------------------------------------

    @property
    def profiling(self) -> bool:
        """Whether forwards are being timed."""
        return self._g._profiling

    def enable_profiling(self) -> None:
        """Time every node and level of each forward from now on."""
        self._g._set_profiling(True)

    def disable_profiling(self) -> None:
        """Stop timing forwards (the default)."""
        self._g._set_profiling(False)

    def profile(self) -> Profile | None:
        """Timings of the last profiled forward, or None when there is none."""
        g = self._g
        if not g._node_times:
            return None
        names = {n.id: n.name for n in g.nodes}
        levels = [tuple(lv) for lv in g.levels]
        return Profile(dict(g._node_times), [int(v) for v in g._level_times], levels, names)

    def _require_profile(self, what: str) -> Profile:
        prof = self.profile()
        if prof is None:
            raise ConfigError(f"{what}: {self.why_no_profile()}")
        return prof

    def why_no_profile(self) -> str:
        """Why :meth:`profile` is None: this graph is not profiled (profiling is per graph, so a
        parent's does not time a subgraph's nodes), or no forward has run since."""
        g = self._g
        who = f"graph {g.label!r}" if g.label else "this graph"
        if not g._profiling:
            return (
                f"no timings yet: {who} is not profiled; call enable_profiling() on it (each "
                "graph of a tree is profiled on its own) and run a forward"
            )
        return f"no timings yet: {who} is profiled but has not run a forward since"


def _emit_svg(scene: Scene, path: str | os.PathLike[str] | None, engine: str) -> str:
    if engine not in ("auto", "graphviz", "builtin"):
        raise ConfigError(f"svg engine must be 'auto', 'graphviz' or 'builtin', got {engine!r}")
    use_dot = engine == "graphviz" or (engine == "auto" and shutil.which("dot") is not None)
    text = graphviz_svg(render_dot(scene)) if use_dot else render_svg(scene)
    if path is not None:
        write_text_atomic(path, text)
    return text
