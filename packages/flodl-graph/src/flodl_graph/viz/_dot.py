"""Graphviz DOT text for a :class:`Scene`, and the SVG it renders to through ``dot -Tsvg``.

Each level becomes a dashed ``cluster_level_<i>`` subgraph with ``rank=same`` so Graphviz keeps
the build's topological levels as horizontal bands.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict

from flodl_core import ConfigError

from ._scene import Scene

__all__ = ["dot_quote", "graphviz_svg", "render_dot"]


def dot_quote(s: str) -> str:
    """A DOT double-quoted string; ``\\n`` in ``s`` stays a line break in labels."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def render_dot(scene: Scene) -> str:
    """DOT source for ``scene`` (levels as clusters, styles as attributes)."""
    lines = [
        f"digraph {dot_quote(scene.title)} {{",
        "  rankdir=TB;",
        '  graph [fontname="Helvetica", compound=true, newrank=true];',
        '  node [fontname="Helvetica", fontsize=11, style=filled];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]
    by_level: dict[int, list[str]] = defaultdict(list)
    for n in scene.nodes:
        tooltip = f", tooltip={dot_quote(n.tooltip)}" if n.tooltip else ""
        by_level[n.level].append(
            f"    {dot_quote(n.id)} [label={dot_quote(n.label)}, shape={n.shape}, "
            f"fillcolor={dot_quote(n.fill)}{tooltip}];"
        )
    for lvl in sorted(by_level):
        cap = scene.level_labels.get(lvl, f"level {lvl}")
        lines += [
            f"  subgraph cluster_level_{lvl} {{",
            f'    label={dot_quote(cap)}; style=dashed; color="#bbbbbb"; fontsize=9;',
            "    rank=same;",
            *by_level[lvl],
            "  }",
        ]
    for e in scene.edges:
        attrs = [f"color={dot_quote(e.color)}"]
        if e.style != "solid":
            attrs.append(f"style={e.style}")
        if e.label:
            attrs.append(f"label={dot_quote(e.label)}, fontcolor={dot_quote(e.color)}")
        if not e.constraint:
            attrs.append("constraint=false")
        lines.append(f"  {dot_quote(e.src)} -> {dot_quote(e.dst)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def graphviz_svg(dot_source: str, timeout: float = 60.0) -> str:
    """Run Graphviz ``dot -Tsvg`` on ``dot_source``. Raises ConfigError if it is absent or fails."""
    exe = shutil.which("dot")
    if exe is None:
        raise ConfigError(
            "Graphviz 'dot' was not found on PATH; install Graphviz (apt install graphviz, "
            "brew install graphviz) or use engine='builtin'"
        )
    proc = subprocess.run(
        [exe, "-Tsvg"],
        input=dot_source.encode(),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        raise ConfigError(f"Graphviz 'dot -Tsvg' failed: {proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode()
