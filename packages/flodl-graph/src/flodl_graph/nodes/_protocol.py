"""The protocol of composite nodes: each kind writes its own statements of the generated forward.

A composite node (loop, gate, switch, map) is a module that knows how to *emit* itself:
``emit(ctx, out, args)`` returns the Python statements that compute its value into the local
``out`` from the input expressions ``args``. The graph's codegen inlines these statements into
the straight-line forward; the node's own ``forward`` (standalone use, outside a graph) compiles
the very same statements once, so each kind has exactly one implementation. Adding a node kind
is one file: a :class:`CompositeNode` subclass with ``kind``, ``emit`` and ``refs_target``.
"""

from __future__ import annotations

import itertools
import linecache
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from flodl_core import ConfigError

from .._spec import NodeKind
from ._runtime import gate_weights, halt, map_each, map_slices, switch_index

_NOT_NAME = re.compile(r"\W")

#: The names emitted statements may use besides locals: every generated forward has them.
RUNTIME_GLOBALS: dict[str, Any] = {
    "torch": torch,
    "_halt": halt,
    "_gate": gate_weights,
    "_switch": switch_index,
    "_map_each": map_each,
    "_map_slices": map_slices,
}


@dataclass(frozen=True)
class EmitContext:
    """Where a node's statements go: its id, its module's expression and its refs' expression.

    ``node``: the node id (names the node's temporaries and its run-time errors); ``module``: an
    expression evaluating to the node's module (``_m['gate_3']`` in a graph, ``self``
    standalone); ``refs``: an expression evaluating to the ``{name: tensor}`` refs dict, or
    None when the node reads no refs.
    """

    node: str
    module: str
    refs: str | None = None

    def tmp(self, stem: str) -> str:
        """A local name private to this node (``_b_loop_2``); node ids never start with ``_``."""
        return f"_{stem}_{_NOT_NAME.sub('_', self.node)}"

    def sub(self, name: str) -> str:
        """The expression of the submodule ``name`` of the node's module."""
        return f"{self.module}._modules[{name!r}]"

    def call(self, module: str, arg: str) -> str:
        """Call ``module`` on ``arg``, through ``forward_named`` with the refs when there are."""
        if self.refs is None:
            return f"{module}({arg})"
        return f"{module}.forward_named({arg}, {self.refs})"


class CompositeNode(nn.Module):
    """Base of the node kinds whose forward is emitted as code (loop, gate, switch, map).

    Subclasses set ``kind`` and implement :meth:`emit` (and :meth:`refs_target` with
    ``refs_role`` if refs reach a part of them). ``node`` names the node in run-time errors: its
    id once a builder placed it, the kind's name standalone.
    """

    kind: ClassVar[NodeKind]
    #: What :meth:`refs_target` is, as build errors name it ("router", "loop body").
    refs_role: ClassVar[str] = "refs target"
    node: str

    def emit(self, ctx: EmitContext, out: str, args: Sequence[str]) -> list[str]:
        """The statements computing this node's value into ``out`` from ``args`` (``args[0]``
        is the stream)."""
        raise NotImplementedError(f"{type(self).__name__} must implement emit(ctx, out, args)")

    def refs_target(self) -> nn.Module | None:
        """The module that receives ``.using()`` refs (router, body), or None if none may."""
        return None

    def forward(self, x: Tensor, refs: Mapping[str, Tensor] | None = None) -> Tensor:
        """Run standalone: the same statements a graph inlines, compiled once per shape of
        the code (x: the stream; refs: named tensors for :meth:`refs_target`)."""
        if refs and self.refs_target() is None:
            raise ConfigError(f"{self.node}: a {self.kind.value} node takes no refs")
        ctx = EmitContext(self.node, "self", "refs" if refs else None)
        fn = compile_node(self.kind, self.emit(ctx, "out", ["x"]))
        return fn(self, x, refs)

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        """``forward`` with refs (the graph calls nested modules this way)."""
        return self.forward(x, refs)


_COMPILED: dict[str, Callable[..., Tensor]] = {}
_MAX_COMPILED = 256  # distinct standalone configurations kept; a bound, not a tuning knob
_FILE_IDS = itertools.count()


def compile_node(kind: NodeKind, statements: list[str]) -> Callable[..., Tensor]:
    """``statements`` as ``f(self, x, refs) -> out``, compiled once per distinct source."""
    source = "\n".join(
        ["def forward(self, x, refs):", *(f"    {s}" for s in statements), "    return out", ""]
    )
    fn = _COMPILED.get(source)
    if fn is None:
        if len(_COMPILED) >= _MAX_COMPILED:
            _COMPILED.clear()
        filename = f"<flodl-graph {kind.value} node {next(_FILE_IDS)}>"
        # Tracebacks through a standalone node show the statement that failed.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        namespace = dict(RUNTIME_GLOBALS)
        exec(compile(source, filename, "exec"), namespace)
        fn = _COMPILED[source] = namespace["forward"]
    return fn
