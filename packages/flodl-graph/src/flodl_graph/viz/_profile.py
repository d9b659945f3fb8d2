"""Per-node and per-level timings of the last profiled forward.

The graph measures wall time per node and per level while profiling is on (off by default: it
costs a clock read per node). When the input is a CUDA tensor the profiled forward waits for the
device after each node, so the numbers are compute times on GPU as on CPU; those waits are part
of what profiling costs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from flodl_core import check_int

__all__ = ["Profile", "format_ns"]


def format_ns(ns: float) -> str:
    """``"850 ns"``, ``"12.3 µs"``, ``"4.56 ms"``, ``"1.23 s"``."""
    if ns < 1e3:
        return f"{ns:.0f} ns"
    if ns < 1e6:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1e9:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


@dataclass(frozen=True)
class Profile:
    """Timings of one forward.

    ``node_ns``: node id -> wall ns. ``level_ns[i]``: wall ns of level ``i``. ``levels[i]``: the
    node ids of level ``i``. ``names``: node id -> display name (first tag, label or id).
    """

    node_ns: Mapping[str, int]
    level_ns: Sequence[int]
    levels: Sequence[Sequence[str]]
    names: Mapping[str, str] = field(default_factory=dict)

    @property
    def total_ns(self) -> int:
        """Sum of the level wall times (the forward's time, less routing between levels)."""
        return int(sum(self.level_ns))

    def level_sum_ns(self, i: int) -> int:
        """Sum of the node times of level ``i``."""
        return int(sum(self.node_ns.get(n, 0) for n in self.levels[i]))

    def parallelism(self, i: int) -> float:
        """Sum of node times / level wall time (1.0 for single-node or unmeasured levels).

        Nodes of a level run one after another here, so this reads at most about 1.0; it
        shows when a level's wall time is dominated by something other than its nodes.
        """
        if i >= len(self.levels) or len(self.levels[i]) <= 1:
            return 1.0
        wall = self.level_ns[i] if i < len(self.level_ns) else 0
        return self.level_sum_ns(i) / wall if wall > 0 else 1.0

    def slowest(self, n: int = 5) -> list[tuple[str, int]]:
        """The ``n`` slowest nodes as ``(id, ns)``, slowest first."""
        # Checked: a negative n would slice from the end (every node but the fastest).
        n = check_int(n, "n", ge=0, where="Profile.slowest")
        return sorted(self.node_ns.items(), key=lambda kv: -kv[1])[:n]

    def __str__(self) -> str:
        lines = [f"forward: {format_ns(self.total_ns)} over {len(self.levels)} levels"]
        for i, ids in enumerate(self.levels):
            wall = self.level_ns[i] if i < len(self.level_ns) else 0
            lines.append(f"  level {i}: {format_ns(wall)}  x{self.parallelism(i):.2f}")
            for nid in ids:
                if nid in self.node_ns:
                    name = self.names.get(nid, nid)
                    shown = name if name == nid else f"{name} ({nid})"
                    lines.append(f"    {shown:<32} {format_ns(self.node_ns[nid]):>10}")
        return "\n".join(lines)
