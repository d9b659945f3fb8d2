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

Features live in namespaces, plain objects set once at build (nothing runs per forward):
``graph.tree`` (paths, freeze/thaw, checkpoints), ``graph.viz`` (DOT/SVG, profiling),
``graph.metrics`` (tag values and recorded numbers per batch and epoch, trends) and
``graph.timings`` (the same class, fed with node times). The seed's flat names
(``graph.freeze``, ``graph.trend``, ``graph.svg`` ...) are aliases of the namespace methods.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, PathError

from ._alias import Alias
from ._codegen import compile_forward, generate
from ._describe import print_summary, render_structure
from ._graph_traces import find_last_trace, find_traces
from ._hash import structural_hash
from ._metrics import Metrics
from ._observe import TagSource, TimingSource
from ._spec import NodeInfo, Plan
from ._tree import GraphTree
from .viz._graph_viz import GraphViz


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


class Graph(nn.Module):
    """A built flow graph. Made by :meth:`FlowBuilder.build`, not constructed directly.

    Call it like any module: ``graph(x)``, or ``graph(x, a, b)`` / ``graph(x, a=..., b=...)``
    when it declares auxiliary inputs. x: the entry stream, whatever shape its first module
    takes; returns the output of the final stream node.

    Namespaces: :attr:`tree` (:class:`GraphTree`), :attr:`viz` (:class:`GraphViz`),
    :attr:`metrics` and :attr:`timings` (both :class:`Metrics`). Between training steps call
    :meth:`end_step`, at the end of an epoch :meth:`end_epoch`.
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
        # Plain objects (not modules), read through the properties below.
        self._ns_tree = GraphTree(self)
        self._ns_viz = GraphViz(self)
        self._ns_metrics = Metrics(self, TagSource(self), "Training trends")
        self._ns_timings = Metrics(self, TimingSource(self), "Timing Trends")
        for node in plan.nodes:
            if node.module is not None:
                self.add_module(node.name, node.module)
        for node in plan.nodes:
            if isinstance(node.module, Graph) and node.module.label is not None:
                node.module._composed = True
        self._steps = 0
        self._epochs = 0
        self._install()

    # -- namespaces (class attributes, so the planner refuses tags named like them) -------------

    @property
    def tree(self) -> GraphTree:
        """Paths, freeze/thaw, checkpoints and summaries of the graph tree."""
        return self._ns_tree

    @property
    def viz(self) -> GraphViz:
        """DOT/SVG diagrams and per-node profiling."""
        return self._ns_viz

    @property
    def metrics(self) -> Metrics:
        """Tag values and recorded numbers, per batch and per epoch, with trends."""
        return self._ns_metrics

    @property
    def timings(self) -> Metrics:
        """Node times (ms) of profiled forwards, per batch and per epoch: the class of
        :attr:`metrics`, fed by :meth:`end_step` or ``timings.collect()``."""
        return self._ns_timings

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

    def traces(self, name: str) -> list[Tensor]:
        """Per-iteration values a ``LoopBody`` loop body published as ``name`` in the last
        forward (autograd history kept); ``"child.name"`` reaches a labeled nested graph."""
        return find_traces(self, name)

    def last_trace(self, name: str) -> Tensor | None:
        """The last iteration's value of trace ``name`` (None when no iteration published it)."""
        return find_last_trace(self, name)

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

    # -- the training loop -----------------------------------------------------------------------

    def end_step(self) -> None:
        """Close one training step (call it after ``optimizer.step()``).

        Detaches carried state (forward-ref buffers, tagged values, modules with
        ``detach_state()``) so the next step's backward stops here: truncated BPTT, and no
        autograd graph kept alive across steps. While profiling, buffers the step's node times
        into :attr:`timings` (every profiled graph of the tree). Counts the step.
        """
        self.detach_state()
        for _, g in self.tree.walk():
            if g._profiling and g._node_times:
                g.timings.collect()
        self._steps += 1

    def end_epoch(self) -> None:
        """Close one epoch: flush :attr:`metrics` and :attr:`timings` of the whole tree (each
        batch buffer's mean becomes the epoch's value, so ``trend`` and
        ``latest_metrics()`` see it). Counts the epoch."""
        self.metrics.flush()
        self.timings.flush()
        self._epochs += 1

    @property
    def step_count(self) -> int:
        """Steps closed with :meth:`end_step`."""
        return self._steps

    @property
    def epoch_count(self) -> int:
        """Epochs closed with :meth:`end_epoch`."""
        return self._epochs

    # -- flat names of the seed: aliases of the namespaces -------------------------------------

    # tree
    validate_path = Alias("tree", GraphTree.validate_path)
    subgraph = Alias("tree", GraphTree.subgraph)
    child_graph = Alias("tree", GraphTree.child_graph)
    tree_children = Alias("tree", GraphTree.children)
    subgraph_paths = Alias("tree", GraphTree.subgraph_paths)
    tagged_at = Alias("tree", GraphTree.tagged_at)
    parameters_at = Alias("tree", GraphTree.parameters_at)
    named_parameters_at = Alias("tree", GraphTree.named_parameters_at)
    named_buffers_at = Alias("tree", GraphTree.named_buffers_at)
    freeze = Alias("tree", GraphTree.freeze)
    thaw = Alias("tree", GraphTree.thaw)
    is_frozen = Alias("tree", GraphTree.is_frozen)
    frozen_parameter_names = Alias("tree", GraphTree.frozen_parameter_names)
    set_training_at = Alias("tree", GraphTree.set_training_at)
    save_checkpoint = Alias("tree", GraphTree.save_checkpoint)
    load_checkpoint = Alias("tree", GraphTree.load_checkpoint)
    load_subgraph_checkpoint = Alias("tree", GraphTree.load_subgraph_checkpoint)
    tree_summary = Alias("tree", GraphTree.summary)
    param_summary = Alias("tree", GraphTree.param_summary)
    # viz
    dot = Alias("viz", GraphViz.dot)
    dot_with_profile = Alias("viz", GraphViz.dot_with_profile)
    svg = Alias("viz", GraphViz.svg)
    svg_with_profile = Alias("viz", GraphViz.svg_with_profile)
    enable_profiling = Alias("viz", GraphViz.enable_profiling)
    disable_profiling = Alias("viz", GraphViz.disable_profiling)
    profile = Alias("viz", GraphViz.profile)
    # metrics
    collect = Alias("metrics", Metrics.collect)
    collect_with = Alias("metrics", Metrics.collect_with)
    collect_at = Alias("metrics", Metrics.collect_at)
    record = Alias("metrics", Metrics.record)
    record_scalar = Alias("metrics", Metrics.record_scalar)
    record_at = Alias("metrics", Metrics.record_at)
    collected = Alias("metrics", Metrics.collected)
    flush = Alias("metrics", Metrics.flush)
    flush_local = Alias("metrics", Metrics.flush_local)
    trend = Alias("metrics", Metrics.trend)
    trends = Alias("metrics", Metrics.trends)
    trend_at = Alias("metrics", Metrics.trend_at)
    reset_trend = Alias("metrics", Metrics.reset)
    latest_metrics = Alias("metrics", Metrics.latest)
    latest_metrics_local = Alias("metrics", Metrics.latest_local)
    eta = Alias("metrics", Metrics.eta)
    plot_html = Alias("metrics", Metrics.plot_html)
    export_trends = Alias("metrics", Metrics.export_csv)
    # timings
    collect_timings = Alias("timings", Metrics.collect)
    flush_timings = Alias("timings", Metrics.flush)
    timing_trend = Alias("timings", Metrics.trend)
    timing_trends = Alias("timings", Metrics.trends)
    reset_timing_trend = Alias("timings", Metrics.reset)
    plot_timings_html = Alias("timings", Metrics.plot_html)
    export_timing_trends = Alias("timings", Metrics.export_csv)

    @property
    def flush_count(self) -> int:
        """How many flushes of :attr:`metrics` moved a value into a history (epochs seen)."""
        return self.metrics.flush_count

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
