"""The protocol that lets lower layers read higher ones.

flodl-monitor shows a graph's metrics without importing flodl-graph: anything with
``latest_metrics()`` is observable. A graph returns dotted names across its whole tree
(``encoder.scan.loss``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Observable(Protocol):
    """Something whose latest epoch metrics can be read by name."""

    def latest_metrics(self) -> dict[str, float]:
        """The most recent value of every metric, by dotted name."""
        ...
