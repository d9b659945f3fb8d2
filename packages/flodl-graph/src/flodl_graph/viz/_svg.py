"""A built-in layered SVG layout, used when Graphviz ``dot`` is not installed.

The graph's topological levels are the layers (top to bottom). Within a layer, nodes are
ordered by a few barycenter sweeps (Sugiyama-style crossing reduction: each node moves towards
the mean position of its neighbours in the other layers), then each layer is centred. Forward
edges are vertical cubic curves; edges that point back up (forward-reference state) are routed
around the right-hand side so they never cut through nodes. Text is measured approximately
(fixed advance per character), which is enough for labels of identifiers and counts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise
from xml.sax.saxutils import escape, quoteattr

from ._scene import Scene, SceneEdge, SceneNode

__all__ = ["render_svg"]

_FONT = 12
_CHAR_W = 7.0  # mean advance of 12px Helvetica/Arial on identifier-like text
_LINE_H = 15.0
_PAD_X, _PAD_Y = 14.0, 9.0
_GAP_X, _GAP_Y = 28.0, 56.0
_MARGIN = 24.0
_LEVEL_LABEL_W = 70.0
_SWEEPS = 4
_DUMMY_W = 10.0  # room a long edge takes where it crosses a level


@dataclass
class _Box:
    node: SceneNode
    w: float
    h: float
    x: float = 0.0  # centre
    y: float = 0.0  # centre

    @property
    def top(self) -> float:
        return self.y - self.h / 2

    @property
    def bottom(self) -> float:
        return self.y + self.h / 2


def _measure(node: SceneNode) -> tuple[float, float]:
    lines = node.label.split("\n")
    w = max(len(s) for s in lines) * _CHAR_W + 2 * _PAD_X
    h = len(lines) * _LINE_H + 2 * _PAD_Y
    if node.shape in ("diamond", "house", "invhouse", "doubleoctagon", "parallelogram"):
        w, h = w * 1.35, h * 1.3  # slanted sides eat into the text area
    elif node.shape in ("ellipse", "circle"):
        w, h = w * 1.2, h * 1.1
    if node.shape == "circle":
        w = h = max(w, h)
    return max(w, 60.0), max(h, 32.0)


def _order_layers(layers: dict[int, list[str]], edges: list[SceneEdge]) -> None:
    """Reorder each layer in place to reduce crossings (barycenter heuristic)."""
    nbrs: dict[str, list[str]] = defaultdict(list)
    for e in edges:
        if e.constraint and e.src != e.dst:
            nbrs[e.src].append(e.dst)
            nbrs[e.dst].append(e.src)
    keys = sorted(layers)
    for sweep in range(_SWEEPS):
        pos = {nid: i for lvl in keys for i, nid in enumerate(layers[lvl])}
        for lvl in keys if sweep % 2 == 0 else reversed(keys):
            # The key reads a snapshot: list.sort empties the list it sorts while it runs, so a
            # key that looked at ``layers[lvl]`` would see no nodes in it.
            here = {nid: i for i, nid in enumerate(layers[lvl])}

            def bary(nid: str, here: dict[str, int] = here, pos: dict[str, int] = pos) -> float:
                others = [pos[n] for n in nbrs[nid] if n in pos and n not in here]
                return sum(others) / len(others) if others else float(here[nid])

            # sorted() is stable, so ties keep the build order (deterministic output).
            layers[lvl] = sorted(here, key=bary)
            pos.update({nid: i for i, nid in enumerate(layers[lvl])})


def _shape_svg(b: _Box) -> str:
    n, x, y, w, h = b.node, b.x, b.y, b.w, b.h
    fill = quoteattr(n.fill)
    common = f'fill={fill} stroke="#333333" stroke-width="1.2"'
    lf, r, t, bt = x - w / 2, x + w / 2, y - h / 2, y + h / 2

    def poly(pts: list[tuple[float, float]]) -> str:
        s = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        return f'<polygon points="{s}" {common}/>'

    if n.shape in ("ellipse", "circle"):
        return f'<ellipse cx="{x:.1f}" cy="{y:.1f}" rx="{w / 2:.1f}" ry="{h / 2:.1f}" {common}/>'
    if n.shape == "diamond":
        return poly([(x, t), (r, y), (x, bt), (lf, y)])
    if n.shape == "parallelogram":
        k = h * 0.35
        return poly([(lf + k, t), (r, t), (r - k, bt), (lf, bt)])
    if n.shape == "house":
        k = h * 0.35
        return poly([(x, t), (r, t + k), (r, bt), (lf, bt), (lf, t + k)])
    if n.shape == "invhouse":
        k = h * 0.35
        return poly([(lf, t), (r, t), (r, bt - k), (x, bt), (lf, bt - k)])
    if n.shape == "doubleoctagon":
        out = []
        for inset in (0.0, 4.0):
            li, ri, ti, bi = lf + inset, r - inset, t + inset, bt - inset
            k = (bi - ti) * 0.3
            xs = (li + k, ri - k, ri, ri, ri - k, li + k, li, li)
            ys = (ti, ti, ti + k, bi - k, bi, bi, bi - k, ti + k)
            out.append(poly(list(zip(xs, ys, strict=True))))
        return "".join(out)
    rect = f'<rect x="{lf:.1f}" y="{t:.1f}" width="{w:.1f}" height="{h:.1f}" {common}/>'
    if n.shape == "box3d":
        d = 5.0
        pts = [(lf + d, t), (lf + d, t - d), (r + d, t - d), (r + d, bt - d), (r, bt - d)]
        line = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
        back = f'<polyline points="{line}" fill="none" stroke="#333333"/>'
        return back + rect
    if n.shape == "tab":
        return (
            rect + f'<rect x="{lf + 3:.1f}" y="{t + 3:.1f}" width="{w - 6:.1f}" '
            f'height="{h - 6:.1f}" fill="none" stroke="#333333" stroke-width="0.8"/>'
        )
    return rect


def _text_svg(x: float, y: float, label: str, cls: str = "label") -> str:
    lines = label.split("\n")
    y0 = y - (len(lines) - 1) * _LINE_H / 2 + _FONT * 0.35
    spans = "".join(
        f'<tspan x="{x:.1f}" y="{y0 + i * _LINE_H:.1f}">{escape(s)}</tspan>'
        for i, s in enumerate(lines)
    )
    return f'<text class="{cls}" text-anchor="middle">{spans}</text>'


def _dash(style: str) -> str:
    return {"dashed": ' stroke-dasharray="6,4"', "dotted": ' stroke-dasharray="2,3"'}.get(style, "")


def _curve(x0: float, y0: float, x1: float, y1: float) -> str:
    """A cubic from (x0, y0) down to (x1, y1) leaving and arriving vertically."""
    dy = (y1 - y0) / 2
    return f" C{x0:.1f},{y0 + dy:.1f} {x1:.1f},{y1 - dy:.1f} {x1:.1f},{y1:.1f}"


@dataclass
class _Layout:
    """Where everything goes: boxes placed, long edges routed through per-level waypoints."""

    boxes: dict[str, _Box]
    layers: dict[int, list[str]]  # level -> ordered node ids and waypoint ids
    edges: list[SceneEdge]  # the edges between drawn nodes
    routes: dict[int, list[str]]  # edge index -> its waypoint ids, top to bottom
    waypoint: dict[str, tuple[float, float, float]]  # waypoint -> (x, band top, band bottom)
    band: dict[int, tuple[float, float]]  # level -> (top, bottom)
    right: float  # x past the widest level: back edges loop beyond it
    width: float
    height: float


def _route_long_edges(
    edges: list[SceneEdge], boxes: dict[str, _Box], layers: dict[int, list[str]]
) -> tuple[dict[int, list[str]], dict[str, float], list[SceneEdge]]:
    """Give each forward edge spanning several levels a waypoint on each level it crosses.

    Sugiyama's dummy nodes: ordered like nodes, they make the edge pass beside the nodes of those
    levels rather than through them. Adds the waypoints to ``layers``; returns the routes (edge
    index -> waypoints), the width of waypoints that carry a label, and the edges to order by.
    """
    routes: dict[int, list[str]] = {}
    slot_w: dict[str, float] = {}
    order_edges: list[SceneEdge] = []
    for k, e in enumerate(edges):
        ls, ld = boxes[e.src].node.level, boxes[e.dst].node.level
        if e.constraint and ld - ls > 1:
            chain = [f"\x00{k}.{lvl}" for lvl in range(ls + 1, ld)]
            for lvl, d in zip(range(ls + 1, ld), chain, strict=True):
                layers[lvl].append(d)
            routes[k] = chain
            if e.label:  # the first waypoint also makes room for the edge's label
                slot_w[chain[0]] = _DUMMY_W + len(e.label) * _CHAR_W * 0.85 + 4
            pts = [e.src, *chain, e.dst]
            order_edges += [SceneEdge(a, b) for a, b in pairwise(pts)]
        else:
            order_edges.append(e)
    return routes, slot_w, order_edges


def _layout(scene: Scene) -> _Layout:
    """Order each level, centre it, and stack the levels top to bottom."""
    boxes = {n.id: _Box(n, *_measure(n)) for n in scene.nodes}
    layers: dict[int, list[str]] = defaultdict(list)
    for n in scene.nodes:
        layers[n.level].append(n.id)
    edges = [e for e in scene.edges if e.src in boxes and e.dst in boxes]
    routes, slot_w, order_edges = _route_long_edges(edges, boxes, layers)
    _order_layers(layers, order_edges)

    def w_of(i: str) -> float:
        return boxes[i].w if i in boxes else slot_w.get(i, _DUMMY_W)

    widths = {
        lvl: sum(w_of(i) for i in ids) + _GAP_X * (len(ids) - 1) for lvl, ids in layers.items()
    }
    inner_w = max(widths.values(), default=0.0)
    left = _MARGIN + _LEVEL_LABEL_W
    waypoint: dict[str, tuple[float, float, float]] = {}
    band: dict[int, tuple[float, float]] = {}
    y = _MARGIN
    for lvl in sorted(layers):
        ids = layers[lvl]
        h = max(boxes[i].h for i in ids if i in boxes)
        band[lvl] = (y, y + h)
        x = left + (inner_w - widths[lvl]) / 2
        for i in ids:
            if i in boxes:
                b = boxes[i]
                b.x, b.y = x + b.w / 2, y + h / 2
            else:
                waypoint[i] = (x + _DUMMY_W / 2, y, y + h)  # the line runs at the left
            x += w_of(i) + _GAP_X
        y += h + _GAP_Y
    n_back = sum(1 for e in edges if boxes[e.dst].node.level <= boxes[e.src].node.level)
    right = left + inner_w + 16.0
    return _Layout(
        boxes,
        layers,
        edges,
        routes,
        waypoint,
        band,
        right,
        width=right + 18.0 * n_back + _MARGIN + 40.0,
        height=max(y - _GAP_Y + _MARGIN, 2 * _MARGIN),
    )


def _markers(edges: list[SceneEdge]) -> tuple[str, dict[str, str]]:
    """One arrow-head marker per edge colour: the ``<defs>`` body and colour -> marker id."""
    colors = sorted({e.color for e in edges})
    marker_id = {c: f"arrow{k}" for k, c in enumerate(colors)}
    defs = "".join(
        f'<marker id="{marker_id[c]}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        f"fill={quoteattr(c)}/></marker>"
        for c in colors
    )
    return defs, marker_id


def _level_frames_svg(scene: Scene, lay: _Layout) -> list[str]:
    """A dashed frame with its caption around each level."""
    out = []
    for lvl in sorted(lay.layers):
        top, bot = lay.band[lvl][0] - 10, lay.band[lvl][1] + 10
        cap = scene.level_labels.get(lvl, f"level {lvl}")
        out.append(
            f'<g class="cluster" id="level-{lvl}"><rect x="{_MARGIN:.1f}" y="{top:.1f}" '
            f'width="{lay.right - _MARGIN:.1f}" height="{bot - top:.1f}" fill="none" '
            f'stroke="#bbbbbb" stroke-dasharray="5,4"/>'
            f'<text x="{_MARGIN + 6:.1f}" y="{top + 14:.1f}" font-size="10" fill="#888888">'
            f"{escape(cap)}</text></g>"
        )
    return out


def _routed_path(s: _Box, d: _Box, route: list[str], lay: _Layout) -> tuple[str, float, float]:
    """A long forward edge through its waypoints; its label sits by the first waypoint."""
    px, py = s.x, s.bottom
    path = f"M{px:.1f},{py:.1f}"
    for wid in route:
        wx, wtop, wbot = lay.waypoint[wid]
        path += _curve(px, py, wx, wtop) + f" L{wx:.1f},{wbot:.1f}"
        px, py = wx, wbot
    path += _curve(px, py, d.x, d.top)
    wx, wtop, wbot = lay.waypoint[route[0]]
    return path, wx + 4, (wtop + wbot) / 2


def _back_path(s: _Box, d: _Box, gx: float) -> tuple[str, float, float]:
    """An edge pointing up (or within a level), looping out right through x = ``gx``."""
    x0, y0, x1, y1 = s.x + s.w / 2, s.y, d.x + d.w / 2, d.y
    path = (
        f"M{x0:.1f},{y0:.1f} C{gx:.1f},{y0:.1f} {gx:.1f},{y0:.1f} "
        f"{gx:.1f},{(y0 + y1) / 2:.1f} "
        f"C{gx:.1f},{y1:.1f} {gx:.1f},{y1:.1f} {x1:.1f},{y1:.1f}"
    )
    return path, gx + 4, (y0 + y1) / 2


def _edges_svg(lay: _Layout, marker_id: dict[str, str]) -> list[str]:
    """Every edge as a path with an arrow head and its optional label."""
    out = []
    back = 0
    for k, e in enumerate(lay.edges):
        s, d = lay.boxes[e.src], lay.boxes[e.dst]
        attrs = (
            f'fill="none" stroke={quoteattr(e.color)} stroke-width="1.3"{_dash(e.style)} '
            f'marker-end="url(#{marker_id[e.color]})"'
        )
        if k in lay.routes:
            path, lx, ly = _routed_path(s, d, lay.routes[k], lay)
        elif d.node.level > s.node.level:
            x0, y0, x1, y1 = s.x, s.bottom, d.x, d.top
            path = f"M{x0:.1f},{y0:.1f}" + _curve(x0, y0, x1, y1)
            lx, ly = (x0 + x1) / 2 + 6, (y0 + y1) / 2
        else:
            back += 1  # each back edge gets its own lane further right
            path, lx, ly = _back_path(s, d, lay.right + 18.0 * back)
        label = (
            f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10" fill={quoteattr(e.color)}>'
            f"{escape(e.label)}</text>"
            if e.label
            else ""
        )
        out.append(
            f'<g class="edge"><title>{escape(e.src)}-&gt;{escape(e.dst)}</title>'
            f'<path d="{path}" {attrs}/>{label}</g>'
        )
    return out


def render_svg(scene: Scene) -> str:
    """Lay out ``scene`` and return a standalone SVG document (UTF-8 text)."""
    lay = _layout(scene)
    defs, marker_id = _markers(lay.edges)
    width, height = lay.width, lay.height
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>\n',
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.1f} {height:.1f}" font-family="Helvetica, Arial, sans-serif" '
        f'font-size="{_FONT}">',
        f"<title>{escape(scene.title)}</title><defs>{defs}</defs>",
        '<rect width="100%" height="100%" fill="#ffffff"/>',
    ]
    out += _level_frames_svg(scene, lay)
    out += _edges_svg(lay, marker_id)
    for n in scene.nodes:
        b = lay.boxes[n.id]
        tip = f"<title>{escape(n.tooltip or n.id)}</title>"
        out.append(
            f'<g class="node" id={quoteattr("node-" + n.id)}>{tip}{_shape_svg(b)}'
            f"{_text_svg(b.x, b.y, n.label)}</g>"
        )
    out.append("</svg>\n")
    return "".join(out)
