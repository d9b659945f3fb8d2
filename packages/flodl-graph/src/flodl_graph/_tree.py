"""Graph tree: dotted paths, freeze/thaw, subgraph checkpoints (``graph.tree``).

A built graph given a ``label`` and used inside another builder becomes a *child* of that graph.
Dotted paths (``"encoder.scan.hidden"``) then reach any child graph or tag from the root:

- every segment but the last must be a child label;
- the last segment names a child graph or a tag; a child label wins over a tag of the same name;
- a tag marked internal (``_``-prefixed or ``.internal()``) is visible inside its own graph only:
  reaching it from a parent is an error;
- there is no upward or fuzzy resolution. A failing path names the segment at fault and lists
  the valid names at that level.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from enum import Enum
from typing import TYPE_CHECKING

import torch
from torch import nn

from flodl_core import ConfigError, PathError

from . import _checkpoint
from .viz._summary import render_param_summary, render_tree_summary

if TYPE_CHECKING:
    from flodl_core.checkpoint import LoadReport

    from ._graph import Graph

__all__ = ["GraphTree", "PathKind", "check_label", "resolve_path"]


class PathKind(Enum):
    """What a dotted path names."""

    SUBGRAPH = "subgraph"
    TAG = "tag"


def check_label(label: object) -> str | None:
    """The error message for an invalid graph label, or None when ``label`` is fine.

    For the builder's ``label(name)``: a label is one path segment, so it is a non-empty string
    without dots or surrounding whitespace.
    """
    if not isinstance(label, str):
        return f"label must be a string, got {type(label).__name__}"
    if not label:
        return "label must not be empty"
    if "." in label:
        return f"label {label!r} contains '.', which separates path segments; use e.g. '_' instead"
    if label != label.strip():
        return f"label {label!r} has leading or trailing whitespace"
    return None


def _split(path: object) -> list[str]:
    if not isinstance(path, str):
        raise ConfigError(f"a graph path must be a string, got {type(path).__name__}")
    if not path:
        raise PathError("empty graph path; expected a dotted path such as 'encoder.scan'")
    segments = path.split(".")
    if any(not s for s in segments):
        raise PathError(f"graph path {path!r} has an empty segment (leading, trailing or '..')")
    return segments


def _visible_tags(g: Graph, cross: bool) -> list[str]:
    internal = set(g.internal_tags) if cross else set()
    return [t for t in g.tag_names if t not in internal]


def resolve_path(root: Graph, path: str) -> tuple[Graph, PathKind, str]:
    """Resolve ``path`` from ``root`` to ``(owner, kind, name)``.

    For a subgraph, ``owner`` is the subgraph itself and ``name`` its label; for a tag, ``owner``
    is the graph that holds the tag and ``name`` the tag.
    """
    segments = _split(path)
    g, cross = root, False
    for depth, seg in enumerate(segments):
        where = "the root graph" if depth == 0 else f"'{'.'.join(segments[:depth])}'"
        children = g.children
        if depth < len(segments) - 1:
            if seg not in children:
                why = (
                    "is a tag, not a child graph" if seg in g.tag_names else "is not a child graph"
                )
                raise PathError(f"path {path!r}: {seg!r} {why} of {where}", children)
            g, cross = children[seg], True
            continue
        if seg in children:
            return children[seg], PathKind.SUBGRAPH, seg
        if seg in g.tag_names:
            if cross and seg in g.internal_tags:
                raise PathError(
                    f"path {path!r}: tag {seg!r} is internal to {where} and cannot be accessed "
                    "from a parent graph",
                    [*children, *_visible_tags(g, cross)],
                )
            return g, PathKind.TAG, seg
        raise PathError(
            f"path {path!r}: no child graph or tag named {seg!r} in {where}",
            [*children, *_visible_tags(g, cross)],
        )
    raise AssertionError("unreachable")  # _split never returns an empty list


class GraphTree:
    """The tree features of a :class:`~flodl_graph.Graph` (``graph.tree``): paths, freezing,
    checkpoints, summaries. ``graph.freeze(...)`` and the other flat names forward here."""

    __slots__ = ("_g",)

    def __init__(self, graph: Graph) -> None:
        self._g = graph

    def __repr__(self) -> str:
        return f"GraphTree({self._g.label or '(root)'}, subgraphs={self.subgraph_paths()})"

    # --- paths -----------------------------------------------------------------------------

    def validate_path(self, path: str) -> PathKind:
        """What ``path`` names (:class:`PathKind`); raises PathError if it does not resolve."""
        return resolve_path(self._g, path)[1]

    def subgraph(self, path: str) -> Graph:
        """The child graph at ``path`` (error if the path names a tag)."""
        g, kind, name = resolve_path(self._g, path)
        if kind is not PathKind.SUBGRAPH:
            raise PathError(f"path {path!r} names the tag {name!r}, not a subgraph", g.children)
        return g

    def child_graph(self, label: str) -> Graph:
        """The direct child graph labeled ``label``."""
        children = self._g.children
        if not isinstance(label, str):
            raise ConfigError(f"child_graph: label must be a str, got {type(label).__name__}")
        try:
            return children[label]
        except KeyError:
            raise PathError(f"no child graph labeled {label!r}", children) from None

    def children(self) -> dict[str, Graph]:
        """The labeled direct children, by label, in build order."""
        return dict(self._g.children)

    def subgraph_paths(self) -> list[str]:
        """Every subgraph path in the tree, depth first (``encoder``, ``encoder.scan`` ...)."""
        return [p for p, _ in self.walk() if p]

    def walk(self, prefix: str = "") -> Iterator[tuple[str, Graph]]:
        """``(path, graph)`` for this graph (path ``prefix``, "" at the root) and every labeled
        descendant, depth first."""
        yield prefix, self._g
        for label, child in self._g.children.items():
            yield from child.tree.walk(f"{prefix}.{label}" if prefix else label)

    def tagged_at(self, path: str) -> torch.Tensor | None:
        """The last forward's value of the tag at ``path``; None if it was not computed."""
        g, kind, name = resolve_path(self._g, path)
        if kind is not PathKind.TAG:
            raise PathError(f"tagged_at: path {path!r} names a subgraph, expected a tag")
        return g.tagged(name)

    # --- parameters and modes --------------------------------------------------------------

    def _module_at(self, path: str) -> tuple[nn.Module | None, str, PathKind]:
        g, kind, name = resolve_path(self._g, path)
        if kind is PathKind.SUBGRAPH:
            return g, name, kind
        return g.tag_node(name).module, name, kind

    def parameters_at(self, path: str) -> list[nn.Parameter]:
        """Parameters of the subgraph or tagged module at ``path`` (empty for a module-less tag).

        A list, so it drops straight into an optimizer group.
        """
        module, _, _ = self._module_at(path)
        return [] if module is None else list(module.parameters())

    def named_parameters_at(self, path: str) -> list[tuple[str, nn.Parameter]]:
        """``(name, param)`` in the target's own namespace (a subgraph's own names, or
        ``"<tag>.<name>"`` for a tagged module)."""
        module, name, kind = self._module_at(path)
        if module is None:
            return []
        prefix = "" if kind is PathKind.SUBGRAPH else f"{name}."
        return [(prefix + n, p) for n, p in module.named_parameters()]

    def named_buffers_at(self, path: str) -> list[tuple[str, torch.Tensor]]:
        """Like :meth:`named_parameters_at`, for buffers."""
        module, name, kind = self._module_at(path)
        if module is None:
            return []
        prefix = "" if kind is PathKind.SUBGRAPH else f"{name}."
        return [(prefix + n, b) for n, b in module.named_buffers()]

    def freeze(self, path: str) -> int:
        """Turn gradients off for every parameter at ``path``; returns how many tensors."""
        params = self.parameters_at(path)
        for p in params:
            p.requires_grad_(False)
        return len(params)

    def thaw(self, path: str) -> int:
        """Turn gradients back on for every parameter at ``path``; returns how many tensors."""
        params = self.parameters_at(path)
        for p in params:
            p.requires_grad_(True)
        return len(params)

    def is_frozen(self, path: str) -> bool:
        """True when ``path`` has at least one parameter and none of them requires grad."""
        params = self.parameters_at(path)
        return bool(params) and not any(p.requires_grad for p in params)

    def frozen_parameter_names(self) -> list[str]:
        """Names (as in ``named_parameters()``) of every parameter that requires no grad."""
        return [n for n, p in self._g.named_parameters() if not p.requires_grad]

    def set_training_at(self, path: str, mode: bool = True) -> None:
        """``train(mode)`` on the subgraph or tagged module at ``path`` only.

        A later ``train()``/``eval()`` on an ancestor overrides it, as in plain PyTorch.
        """
        module, _, _ = self._module_at(path)
        if module is not None:
            module.train(mode)

    # --- checkpoints -----------------------------------------------------------------------

    def save_checkpoint(
        self, path: str | os.PathLike[str], metadata: Mapping[str, str] | None = None
    ) -> None:
        """Save parameters and buffers in the ``.fdl`` format, with this graph's structural
        hash and its frozen set (so a resumed run freezes exactly what was frozen)."""
        _checkpoint.save_graph(self._g, path, metadata)

    def load_checkpoint(self, path: str | os.PathLike[str], strict: bool = True) -> LoadReport:
        """Load a checkpoint saved from a graph of the same structure (hash checked) and
        restore its frozen set. On any error the graph is left unchanged."""
        return _checkpoint.load_graph(self._g, path, strict=strict)

    def load_subgraph_checkpoint(
        self, path: str, file: str | os.PathLike[str], strict: bool = True
    ) -> LoadReport:
        """Load a checkpoint of a standalone-trained component into the subgraph at ``path``.

        Names are matched in the subgraph's own namespace and its structural hash is checked;
        a mismatch raises CheckpointError and leaves the model untouched.
        """
        return _checkpoint.load_subgraph(self._g, path, file, strict=strict)

    # --- summaries -------------------------------------------------------------------------

    def summary(self) -> str:
        """The tree as text: hash, visible tags and parameter counts of every subgraph."""
        return render_tree_summary(self._g)

    def param_summary(self) -> str:
        """Parameter counts (total, trainable, frozen) for the root and every subgraph."""
        return render_param_summary(self._g)
