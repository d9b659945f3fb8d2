"""``Graph``: a built flow graph, a ``torch.nn.Module`` with a generated forward.

Every node's module is registered with ``add_module(node.name, module)``, so
``named_parameters()`` / ``state_dict()`` keys are dotted and stable (``encoder.0.weight``,
``head.weight``, ``encoder.scan.hidden.weight`` for a labeled nested graph) and double as
graph paths. ``forward`` is Python source generated once at build (see ``graph.code``), so a
graph costs what the same model written by hand costs, and ``torch.compile`` traces it.

Read-only structure, for the tree, observation and visualization code:

- ``label`` (``FlowBuilder.label``), ``is_composed`` (nested, labeled, in a built parent);
- ``nodes``: ``NodeInfo`` per node in topological order; ``levels``: node ids per Kahn level.
  ``NodeInfo.kind`` is one of ``NODE_KINDS``: ``input`` (graph inputs, no module), ``module``
  (``FlowBuilder(m)``, ``through``), ``also`` (residual branch modules), ``add`` (the residual
  sum, no module), ``fork``, ``split`` (one branch each), ``merge`` (no module), ``loop``,
  ``gate``, ``switch``, ``map`` (modules from ``flodl_graph.nodes`` holding the body/router/
  experts/branches) and ``graph`` (any node whose module is a nested ``Graph``);
- ``tag_names``, ``tag_node(name)``, ``internal_tags``, ``tag_groups``, ``input_names``;
- ``children``: labeled nested graphs by label (direct children only);
- ``tagged(name)``: the value of a tag from the last forward;
- ``structural_hash()`` / ``short_hash()``;
- ``_set_profiling(on)``: per-node (``_node_times``, ns by id) and per-level (``_level_times``)
  timings of the last forward; off means the plain fast forward.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, PathError

from ._codegen import compile_forward, generate
from ._describe import print_summary, render_structure
from ._hash import structural_hash
from ._observe import ObserveMixin
from ._spec import NodeInfo, Plan
from ._tree import TreeMixin
from .viz._mixin import VizMixin


class ChildGraphs(dict):  # type: ignore[type-arg]
    """Labeled nested graphs by label (a ``dict``).

    Calling it keeps ``nn.Module.children()`` working: ``graph.children()`` still iterates the
    direct submodules, as ``apply``, ``.to()`` and other PyTorch code expect.
    """

    def __init__(self, owner: nn.Module, graphs: Mapping[str, Graph]) -> None:
        super().__init__(graphs)
        self._owner = owner

    def __call__(self) -> Iterator[nn.Module]:
        return nn.Module.children(self._owner)


class Graph(TreeMixin, ObserveMixin, VizMixin, nn.Module):
    """A built flow graph. Made by :meth:`FlowBuilder.build`, not constructed directly.

    Call it like any module: ``graph(x)``, or ``graph(x, a, b)`` / ``graph(x, a=..., b=...)``
    when it declares auxiliary inputs. x: the entry stream, whatever shape its first module
    takes; returns the output of the final stream node.
    """

    def __init__(self, plan: Plan) -> None:
        nn.Module.__init__(self)
        self._plan = plan
        self._tagged: dict[str, Tensor] = {}
        self._state: dict[str, Tensor | None] = dict.fromkeys(plan.state_tags)
        self._node_times: dict[str, int] = {}
        self._level_times: list[int] = []
        self._profiling = False
        self._composed = False
        for node in plan.nodes:
            if node.module is not None:
                self.add_module(node.name, node.module)
        for node in plan.nodes:
            if isinstance(node.module, Graph) and node.module.label is not None:
                node.module._composed = True
        for hook in ("_init_tree", "_init_observe", "_init_viz"):
            fn = getattr(self, hook, None)
            if callable(fn):
                fn()
        self._install()

    # -- the generated forward -----------------------------------------------------------------

    def _install(self) -> None:
        generated = generate(self._plan, profile=self._profiling)
        fn = compile_forward(generated.source, self._plan.label)
        self._generated = generated
        self._node_index = {n.id: n for n in self._plan.nodes}
        self._code = generated.source
        self._forward_fn = fn
        # An instance attribute: nn.Module.__call__ finds it before the class-level forward.
        self.forward = types.MethodType(fn, self)

    def forward(self, x: Tensor, *inputs: Tensor, **named: Tensor) -> Tensor:  # type: ignore[override]
        """Run the graph (the generated forward; see :attr:`code`)."""
        return self._forward_fn(self, x, *inputs, **named)

    @property
    def code(self) -> str:
        """The Python source of the forward in use (readable, like ``torch.fx``'s)."""
        return self._code

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        """Run as a node that receives refs: each ref feeds the auxiliary input of that name."""
        missing = [n for n in self._plan.input_names if n not in refs]
        if missing:
            raise ConfigError(
                f"graph {self.label or '(unlabeled)'}: refs {sorted(refs)} lack its inputs "
                f"{missing}"
            )
        return self(x, **{n: refs[n] for n in self._plan.input_names})

    def _set_profiling(self, on: bool) -> None:
        """Switch to the forward that times every node and level (``_node_times``,
        ``_level_times``), or back to the plain one."""
        if bool(on) != self._profiling:
            self._profiling = bool(on)
            self._install()

    # -- structure -----------------------------------------------------------------------------

    @property
    def label(self) -> str | None:
        """The label given with ``FlowBuilder.label`` (None if none)."""
        return self._plan.label

    @property
    def is_composed(self) -> bool:
        """True once this labeled graph is a node of a built parent graph."""
        return self._composed

    @property
    def nodes(self) -> tuple[NodeInfo, ...]:
        """Every node, in topological order."""
        return self._plan.nodes

    @property
    def output_node(self) -> NodeInfo:
        """The node whose value ``forward`` returns (the end of the main stream)."""
        return next(n for n in self._plan.nodes if n.id == self._plan.output)

    @property
    def levels(self) -> tuple[tuple[str, ...], ...]:
        """Node ids per topological level (Kahn; level 0 holds the inputs)."""
        return self._plan.levels

    @property
    def tag_names(self) -> tuple[str, ...]:
        """Every tag (group members and auxiliary input names included), in tagging order."""
        return tuple(self._plan.tags)

    def tag_node(self, name: str) -> NodeInfo:
        """The node carrying tag ``name``; :class:`~flodl_core.PathError` if there is none."""
        nid = self._plan.tags.get(name)
        if nid is None:
            raise PathError(f"no tag {name!r} in graph {self.label or '(root)'}", self._plan.tags)
        return next(n for n in self._plan.nodes if n.id == nid)

    @property
    def internal_tags(self) -> frozenset[str]:
        """Tags hidden from parent graphs (``_``-prefixed or marked ``internal``)."""
        return self._plan.internal_tags

    @property
    def tag_groups(self) -> dict[str, tuple[str, ...]]:
        """Tag groups (``tag_group``) and their member tags."""
        return dict(self._plan.tag_groups)

    @property
    def input_names(self) -> tuple[str, ...]:
        """Auxiliary inputs, in declaration order (positional after ``x``)."""
        return self._plan.input_names

    @property
    def children(self) -> ChildGraphs:  # type: ignore[override]
        """Labeled nested graphs by label (direct node modules only). Still callable as
        ``nn.Module.children()``."""
        graphs = {
            n.module.label: n.module
            for n in self._plan.nodes
            if isinstance(n.module, Graph) and n.module.label is not None
        }
        return ChildGraphs(self, graphs)

    def tagged(self, name: str) -> Tensor | None:
        """The value tag ``name`` took in the last forward (None if it was not produced, e.g.
        a branch not taken or before any forward)."""
        if name not in self._plan.tags:
            raise PathError(f"no tag {name!r} in graph {self.label or '(root)'}", self._plan.tags)
        return self._tagged.get(name)

    def structural_hash(self) -> str:
        """SHA-256 (64 lowercase hex) over the structure: node ids, module classes, parameter
        and buffer names/shapes, edges, tags, inputs. Not values, dtypes or labels."""
        return structural_hash(self)

    def short_hash(self) -> str:
        """The first 8 characters of :meth:`structural_hash`."""
        return self.structural_hash()[:8]

    # -- state across calls --------------------------------------------------------------------

    def _graphs(self) -> Iterator[Graph]:
        return (m for m in self.modules() if isinstance(m, Graph))

    def reset_state(self) -> None:
        """Forget forward-ref state (next call reads zeros), here and in nested graphs."""
        for g in self._graphs():
            for k in g._state:
                g._state[k] = None

    def detach_state(self) -> None:
        """Cut the autograd history of carried state (truncated BPTT), keeping the values:
        forward-ref state and tagged outputs here and in nested graphs, and every module
        that defines ``detach_state()``."""
        for m in self.modules():
            if isinstance(m, Graph):
                m._state = {k: None if v is None else v.detach() for k, v in m._state.items()}
                m._tagged = {k: v.detach() for k, v in m._tagged.items()}
            elif callable(getattr(type(m), "detach_state", None)):
                m.detach_state()

    # -- PyTorch integration -------------------------------------------------------------------

    def _apply(self, fn: Callable[[Tensor], Tensor], recurse: bool = True) -> Graph:  # type: ignore[override]
        super()._apply(fn, recurse)
        # Carried state follows .to()/.half() like a buffer would; tagged values are dropped.
        with torch.no_grad():
            self._state = {k: None if v is None else fn(v.detach()) for k, v in self._state.items()}
        self._tagged = {}
        return self

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("forward", "_forward_fn", "_generated", "_node_index"):
            state.pop(key, None)
        state["_tagged"] = {}
        state["_state"] = {k: None if v is None else v.detach() for k, v in self._state.items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._install()

    def extra_repr(self) -> str:
        return f"label={self.label!r}" if self.label else ""

    def __repr__(self) -> str:
        """The structure, node by node (see :func:`print`): kinds, modules, inputs, tags."""
        return render_structure(self)

    def summary(
        self,
        input_shape: Any,
        print_fn: Callable[[str], Any] = print,
        **inputs: Any,
    ) -> None:
        """Print each node's output shape and parameter count, from one forward on zeros.

        ``input_shape``: the shape of ``x`` with its batch dimension, e.g. ``(1, 784)``, or an
        example tensor (integer token ids, say). Auxiliary inputs go by name as shapes or
        tensors. The forward runs in eval mode without gradients; training flags, carried
        state and tagged values are restored afterwards, so the model is left as it was.
        """
        print_summary(self, input_shape, inputs, print_fn)
