"""``FlowBuilder.verbose()``: what a verbose build prints (the tree and the parameters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .viz._summary import render_param_summary, render_tree_summary

if TYPE_CHECKING:
    from ._graph import Graph


def print_build_summary(graph: Graph, print_fn: Callable[[str], Any] = print) -> None:
    """Print ``graph``'s tree summary (labels, tags, hash, parameter counts per subgraph) and
    its parameter summary (totals and shares per subgraph), as a verbose build does."""
    print_fn(render_tree_summary(graph))
    print_fn(render_param_summary(graph))
