"""Text views of a graph tree: ``tree_summary()`` and ``param_summary()``.

Parameter counts are in scalar elements (``numel``); a parameter shared by two subgraphs counts
in each of them, and once in any graph that holds both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._graph import Graph

__all__ = ["render_param_summary", "render_tree_summary"]


def _counts(g: Graph) -> tuple[int, int]:
    """(total, frozen) parameter elements of ``g``."""
    total = frozen = 0
    for p in g.parameters():
        total += p.numel()
        if not p.requires_grad:
            frozen += p.numel()
    return total, frozen


def _param_line(total: int, frozen: int) -> str:
    if total and frozen == total:
        return f"params: {total:,} [frozen]"
    if frozen:
        return f"params: {total:,} ({frozen:,} frozen)"
    return f"params: {total:,}"


def _tree_lines(g: Graph, indent: str, out: list[str]) -> None:
    internal = set(g.internal_tags)
    tags = sorted(t for t in g.tag_names if t not in internal)
    out.append(f"{indent}+-- tags: {', '.join(tags) if tags else '(none)'}")
    out.append(f"{indent}+-- {_param_line(*_counts(g))}")
    for label, child in g.children.items():
        out.append(f"{indent}+-- {label} [hash: {child.short_hash()}]")
        _tree_lines(child, indent + "|   ", out)


def render_tree_summary(g: Graph) -> str:
    """``(root) [hash: xxxxxxxx]`` then tags, params and each child, indented per level."""
    name = g.label or "(root)"
    out = [f"{name} [hash: {g.short_hash()}]"]
    _tree_lines(g, "", out)
    return "\n".join(out)


def render_param_summary(g: Graph) -> str:
    """A table of total / trainable / frozen parameter elements for the root and each subgraph."""
    total, frozen = _counts(g)
    rows: list[tuple[str, int, int]] = [(g.label or "(root)", total, frozen)]
    rows += [(path, *_counts(sub)) for path, sub in g.tree.walk() if path]
    width = max(len("path"), *(len(r[0]) for r in rows))
    head = f"{'path':<{width}}  {'params':>12}  {'share':>6}  {'trainable':>12}  {'frozen':>12}"
    lines = [
        f"parameters: {total:,} total, {total - frozen:,} trainable, {frozen:,} frozen",
        head,
        "-" * len(head),
    ]
    for path, n, fz in rows:
        share = f"{100.0 * n / total:.1f}%" if total else "-"
        lines.append(f"{path:<{width}}  {n:>12,}  {share:>6}  {n - fz:>12,}  {fz:>12,}")
    return "\n".join(lines)
