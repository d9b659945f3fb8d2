"""A renderer-neutral picture of a graph: styled nodes on levels, styled edges.

Both renderers (Graphviz DOT text in ``_dot.py`` and the built-in SVG layout in ``_svg.py``) draw
the same :class:`Scene`, so the two outputs always agree on what is shown and how it is styled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["EdgeStyle", "Scene", "SceneEdge", "SceneNode", "Shape", "heat_color"]

Shape = Literal[
    "box",
    "box3d",
    "ellipse",
    "circle",
    "diamond",
    "parallelogram",
    "house",
    "invhouse",
    "doubleoctagon",
    "tab",
]
EdgeStyle = Literal["solid", "dashed", "dotted"]


@dataclass(frozen=True)
class SceneNode:
    """One drawn node. ``label`` may hold several lines separated by ``\\n``."""

    id: str
    label: str
    level: int
    shape: Shape = "box"
    fill: str = "#eaecee"
    tooltip: str = ""


@dataclass(frozen=True)
class SceneEdge:
    """One drawn edge. ``constraint=False`` edges (state feedback) do not shape the layout."""

    src: str
    dst: str
    style: EdgeStyle = "solid"
    color: str = "#555555"
    label: str = ""
    constraint: bool = True


@dataclass
class Scene:
    """Nodes grouped by level (``level_labels[i]`` captions level ``i``) and edges between them."""

    nodes: list[SceneNode] = field(default_factory=list)
    edges: list[SceneEdge] = field(default_factory=list)
    level_labels: dict[int, str] = field(default_factory=dict)
    title: str = "G"


# Heat-map stops: green -> yellow -> red, piecewise linear with the knee at 0.5.
_GREEN = (0x27, 0xAE, 0x60)
_YELLOW = (0xF3, 0x9C, 0x12)
_RED = (0xE7, 0x4C, 0x3C)


def heat_color(frac: float) -> str:
    """``#rrggbb`` for ``frac`` in [0, 1] (clamped): 0 green, 0.5 yellow, 1 red."""
    f = min(max(float(frac), 0.0), 1.0) if frac == frac else 0.0
    lo, hi, t = (_GREEN, _YELLOW, f * 2) if f <= 0.5 else (_YELLOW, _RED, (f - 0.5) * 2)
    rgb = (round(a + (b - a) * t) for a, b in zip(lo, hi, strict=True))
    return "#" + "".join(f"{c:02x}" for c in rgb)
