"""``FlowBuilder``: records a graph as a fluent chain of calls, collecting every error.

The builder only records intent (node records, tags, refs); ``build()`` hands it to the
planner (``_plan``), which checks it and resolves it once, and to ``Graph``, which generates
the forward. A failing call records an error naming the call and the node and leaves the
builder as it was, so one ``build()`` reports every problem of a chain at once.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from torch import nn

from flodl_core import BuildError

from ._spec import MergeOp, NodeDraft, NodeKind, Recording, snake_name, tag_problem
from ._tree import check_label
from ._verbose import print_build_summary
from .nodes._gate import Gate
from .nodes._protocol import CompositeNode
from .nodes._runtime import supports_refs
from .nodes._switch import Switch

if TYPE_CHECKING:
    from ._graph import Graph
    from ._subbuilders import LoopBuilder, MapBuilder

#: Names the generated forward uses itself; auxiliary inputs cannot take them.
RESERVED_INPUTS = frozenset({"self", "x", "torch"})


def _is_graph(module: object) -> bool:
    from ._graph import Graph

    return isinstance(module, Graph)


def _cls(obj: object) -> str:
    return type(obj).__name__


class FlowBuilder:
    """Describes a graph as data flow; ``build()`` returns a :class:`Graph` (an ``nn.Module``).

    ``FlowBuilder(first)`` starts the stream with ``first`` (its input is the graph input);
    ``FlowBuilder()`` starts with an identity. Every method returns the builder (``loop_body``
    and ``map`` return a small sub-builder whose final call returns it), so a model reads as a
    chain::

        model = (FlowBuilder(nn.Linear(2, 16)).through(nn.GELU())
                 .also(nn.Linear(16, 16)).through(nn.Linear(16, 2)).build())
    """

    def __init__(self, first: nn.Module | None = None) -> None:
        self._nodes: dict[str, NodeDraft] = {}
        self._counter = 0
        self._errors: list[str] = []
        self._tags: dict[str, str] = {}  # tag -> node id
        self._pending: dict[str, list[str]] = {}  # forward-ref tag -> consumer node ids
        self._groups: dict[str, tuple[str, ...]] = {}
        self._inputs: list[tuple[str, str]] = []  # (aux input name, node id)
        self._label: str | None = None
        self._internal: list[str] = []
        self._fork_target: str | None = None
        self._on_target: str | None = None
        self._built = False
        self._verbose = False
        if first is not None and not isinstance(first, nn.Module):
            self._fail(f"FlowBuilder({_cls(first)})", "expected an nn.Module as the first node")
            first = None
        if first is None:
            self._entry = self._append(NodeKind.INPUT, None, [], "FlowBuilder()", "identity")
        else:
            self._entry = self._add_module(first, NodeKind.MODULE, [], "FlowBuilder")
            self._on_target = self._entry
        self._streams: list[str] = [self._entry]

    # -- recording ---------------------------------------------------------------------------

    def _fail(self, call: str, message: str) -> FlowBuilder:
        self._errors.append(f"{call}: {message}")
        return self

    def _append(
        self,
        kind: NodeKind,
        module: nn.Module | None,
        inputs: Sequence[str],
        call: str | Callable[[str], str],
        prefix: str | None = None,
        options: dict[str, Any] | None = None,
    ) -> str:
        """Record a node and return its id, ``"{prefix}_{counter}"`` (prefix: the module's
        class in snake_case). ``call`` is the call as errors name it, or makes it from the id."""
        self._counter += 1
        if prefix is None:
            prefix = snake_name(_cls(module)) if module is not None else kind.value
        nid = f"{prefix}_{self._counter}"
        if module is not None and _is_graph(module):
            kind = NodeKind.GRAPH
        text = call(nid) if callable(call) else call
        self._nodes[nid] = NodeDraft(nid, kind, module, list(inputs), text, options=options or {})
        return nid

    def _add_module(
        self, module: nn.Module, kind: NodeKind, inputs: Sequence[str], method: str
    ) -> str:
        return self._append(kind, module, inputs, lambda nid: f"{method}({nid})")

    def _attach(
        self,
        call: str,
        checked: Sequence[object],
        make: Callable[[], CompositeNode],
        source: str | None = None,
        problem: str | None = None,
    ) -> FlowBuilder:
        """Append a composite node on the single stream (or on ``source``) and continue the
        stream from it. ``checked`` are the user's modules, checked first; then ``problem``
        (an argument error found by the caller), then the single stream. The one way the
        composite calls and their sub-builders add a node."""
        if not self._modules_ok(call, *checked):
            return self
        if problem is not None:
            return self._fail(call, f"{problem} ({self._where()})")
        if not self._single(call):
            return self
        node = make()
        inputs = [source] if source is not None else self._streams
        method = call.split("(")[0]
        nid = self._append(node.kind, node, inputs, lambda nid: f"{method}({nid})")
        node.node = nid
        return self._stream_to(nid)

    def _tag_node(self, name: str) -> str | None:
        """The node id carrying tag ``name`` so far, or None."""
        return self._tags.get(name)

    def _known_tags(self) -> list[str]:
        return sorted(self._tags)

    def _where(self) -> str:
        return f"after {', '.join(self._streams)}"

    def _modules_ok(self, call: str, *modules: object) -> bool:
        bad = [m for m in modules if not isinstance(m, nn.Module)]
        for m in bad:
            self._fail(call, f"expected an nn.Module, got {_cls(m)} ({self._where()})")
        return not bad

    def _module_list(self, call: str, what: str, modules: object) -> list[nn.Module] | None:
        if isinstance(modules, nn.Module) or not isinstance(modules, (list, tuple)):
            self._fail(call, f"expected a list of {what}, got {_cls(modules)} ({self._where()})")
            return None
        if len(modules) < 2:
            self._fail(call, f"requires at least 2 {what}, got {len(modules)} ({self._where()})")
            return None
        return list(modules) if self._modules_ok(call, *modules) else None

    def _name_list(self, method: str, names: object) -> list[str] | None:
        """``"a"`` or an iterable of names as a list; for anything else (``None``, a number)
        record an error naming ``method`` and return None."""
        if isinstance(names, str):
            return [names]
        if isinstance(names, Iterable):
            return list(names)
        self._fail(
            f"{method}({names!r})",
            f"expected a name or a list of names, got {_cls(names)} ({self._where()})",
        )
        return None

    def _single(self, call: str) -> bool:
        if len(self._streams) != 1:
            self._fail(
                call,
                f"requires a single stream, but {len(self._streams)} are open "
                f"({', '.join(self._streams)}); call merge(...) first",
            )
            return False
        return True

    def _stream_to(self, nid: str, on_target: str | None = None) -> FlowBuilder:
        self._streams = [nid]
        self._on_target = nid if on_target is None else on_target
        self._fork_target = None
        return self

    # -- linear flow ---------------------------------------------------------------------------

    def through(self, module: nn.Module) -> FlowBuilder:
        """Feed the stream through ``module``: x -> module(x)."""
        call = f"through({_cls(module)})"
        if not (self._modules_ok(call, module) and self._single(call)):
            return self
        return self._stream_to(self._add_module(module, NodeKind.MODULE, self._streams, "through"))

    def also(self, module: nn.Module) -> FlowBuilder:
        """Residual: x -> x + module(x). A following ``using`` feeds refs to ``module``."""
        call = f"also({_cls(module)})"
        if not (self._modules_ok(call, module) and self._single(call)):
            return self
        s = self._streams[0]
        m = self._add_module(module, NodeKind.ALSO, [s], "also")
        add = self._append(NodeKind.ADD, None, [s, m], f"also({m})")
        return self._stream_to(add, on_target=m)

    def also_with(self, skip: nn.Module, main: nn.Module) -> FlowBuilder:
        """Residual with a projected skip: x -> skip(x) + main(x). ``using`` feeds ``main``."""
        call = f"also_with({_cls(skip)}, {_cls(main)})"
        if not (self._modules_ok(call, skip, main) and self._single(call)):
            return self
        s = self._streams[0]
        k = self._add_module(skip, NodeKind.ALSO, [s], "also_with")
        m = self._add_module(main, NodeKind.ALSO, [s], "also_with")
        add = self._append(NodeKind.ADD, None, [k, m], f"also_with({k}, {m})")
        return self._stream_to(add, on_target=m)

    def fork(self, module: nn.Module) -> FlowBuilder:
        """Side branch: compute ``module(x)`` and keep the stream on x. The next ``tag`` names
        the side output; a following ``using`` feeds refs to ``module``."""
        call = f"fork({_cls(module)})"
        if not (self._modules_ok(call, module) and self._single(call)):
            return self
        f = self._add_module(module, NodeKind.FORK, self._streams, "fork")
        self._on_target = f
        self._fork_target = f
        return self

    def split(self, modules: Sequence[nn.Module]) -> FlowBuilder:
        """Parallel branches, each fed the stream; ``merge`` joins them. A following ``using``
        feeds refs to every branch."""
        call = f"split([{len(modules) if isinstance(modules, (list, tuple)) else '?'}])"
        mods = self._module_list(call, "branches", modules)
        if mods is None or not self._single(call):
            return self
        s = self._streams[0]
        self._streams = [self._add_module(m, NodeKind.SPLIT, [s], "split") for m in mods]
        self._on_target = None
        self._fork_target = None
        return self

    def merge(self, op: MergeOp | str = MergeOp.ADD) -> FlowBuilder:
        """Join the streams of a ``split``: ``MergeOp.ADD`` (sum) or ``MergeOp.MEAN``."""
        call = f"merge({getattr(op, 'name', op)!s})"
        try:
            op = MergeOp(op)
        except ValueError:
            return self._fail(call, f"unknown merge op {op!r}; expected MergeOp.ADD or MEAN")
        if len(self._streams) < 2:
            return self._fail(call, f"requires multiple streams (after split), {self._where()}")
        nid = self._append(NodeKind.MERGE, None, self._streams, call, options={"op": op})
        return self._stream_to(nid)

    # -- names and refs ------------------------------------------------------------------------

    def _name_taken(self, name: str) -> str | None:
        if name in self._tags:
            return f"tag {name!r} is already on {self._tags[name]}"
        if name in self._groups:
            return f"{name!r} is already a tag group"
        return None

    def _set_tag(self, name: str, nid: str) -> None:
        self._tags[name] = nid
        self._nodes[nid].tags.append(name)
        # A later tag resolves the refs that were waiting for it: they read this node's value
        # of the previous call (state carried across calls).
        self._pending.pop(name, None)

    def tag(self, name: str) -> FlowBuilder:
        """Name the current stream (or the pending ``fork`` output) so ``using``, ``map.over``,
        ``graph.tagged`` and graph paths can reach it."""
        call = f"tag({name!r})"
        problem = tag_problem(name) or self._name_taken(name)
        if self._fork_target is not None:
            nid, self._fork_target = self._fork_target, None
        elif not self._single(call):
            return self
        else:
            nid = self._streams[0]
        if problem:
            return self._fail(call, f"{problem} (tagging {nid})")
        self._set_tag(name, nid)
        return self

    def tag_group(self, name: str) -> FlowBuilder:
        """After ``split``, tag branch i as ``"{name}_{i}"`` and remember them as a group."""
        call = f"tag_group({name!r})"
        if len(self._streams) < 2:
            return self._fail(call, f"requires at least 2 streams (after split), {self._where()}")
        problem = tag_problem(name) or self._name_taken(name)
        names = [f"{name}_{i}" for i in range(len(self._streams))]
        problem = problem or next(
            (f"group member {n!r} collides with an existing tag" for n in names if n in self._tags),
            None,
        )
        if problem:
            return self._fail(call, problem)
        for n, nid in zip(names, self._streams, strict=True):
            self._set_tag(n, nid)
        self._groups[name] = tuple(names)
        return self

    def input(self, names: Sequence[str] | str) -> FlowBuilder:
        """Declare auxiliary graph inputs; call ``graph(x, a, b)`` or ``graph(x, a=..., b=...)``.

        Each input is tagged with its name, so ``using([name])`` reads it. A ``using`` that named
        it earlier reads the current call's value (inputs exist from the start of each call).
        """
        given = self._name_list("input", names)
        for name in given or ():
            call = f"input({name!r})"
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                self._fail(call, "an input name must be a Python identifier (it is a parameter)")
                continue
            if name.startswith("_") or name in RESERVED_INPUTS:
                self._fail(
                    call,
                    f"input names cannot start with '_' or be one of {sorted(RESERVED_INPUTS)}",
                )
                continue
            taken = self._name_taken(name)
            if taken:
                self._fail(call, f"name conflicts with an existing tag: {taken}")
                continue
            nid = self._append(NodeKind.INPUT, None, [], call, prefix=f"input_{name}")
            waiting = self._pending.get(name, [])
            for consumer in waiting:
                self._nodes[consumer].forward_refs.discard(name)
            self._set_tag(name, nid)
            self._inputs.append((name, nid))
        return self

    def _ref_problem(self, node: NodeDraft) -> str | None:
        kind, m = node.kind, node.module
        if kind is NodeKind.INPUT:
            return (
                "using requires a preceding through, split, or merge (a graph input takes no refs)"
            )
        if m is None:
            return f"{node.id} ({kind}) takes no refs"
        hint = "implement forward_named(x, refs) on it"
        if isinstance(m, CompositeNode):
            # Refs reach a part of a composite node: the router of a gate/switch, a loop body.
            target = m.refs_target()
            if target is None:
                return f"{node.id} ({kind}) takes no refs"
            if not supports_refs(target):
                role = m.refs_role
                routers = " (SoftmaxRouter, SigmoidRouter, ArgmaxSelector do)"
                return (
                    f"the {role} {_cls(target)} of {node.id} does not support .using() refs; "
                    f"{hint}{routers if role == 'router' else ''}"
                )
            return None
        if not supports_refs(m):
            return f"{node.id} ({_cls(m)}) does not support .using() refs; {hint}"
        return None

    def using(self, refs: Sequence[str] | str) -> FlowBuilder:
        """Feed tagged values to the last module as named refs (``forward_named(x, refs)``).

        A tag defined earlier is a backward ref (this call's value). A tag defined later is a
        forward ref: it reads the previous call's value, zeros on the first call and after
        ``reset_state()``. After ``split`` the refs reach every branch.
        """
        names = self._name_list("using", refs)
        if not names:
            return self
        call = f"using({names!r})"
        bad = [n for n in names if tag_problem(n)]
        if bad:
            return self._fail(call, "; ".join(str(tag_problem(n)) for n in bad))
        targets = [self._on_target] if self._on_target is not None else list(self._streams)
        for tid in targets:
            node = self._nodes[tid]
            problem = self._ref_problem(node)
            if problem:
                self._fail(call, problem)
                continue
            for name in names:
                if name in node.refs:
                    self._fail(call, f"{tid} already reads ref {name!r}")
                elif name in self._groups:
                    self._fail(call, f"{name!r} is a tag group; use its tags {self._groups[name]}")
                else:
                    node.refs.append(name)
                    if name not in self._tags:
                        node.forward_refs.add(name)
                        self._pending.setdefault(name, []).append(tid)
        return self

    # -- composite nodes -----------------------------------------------------------------------

    def loop_body(self, body: nn.Module) -> LoopBuilder:
        """Repeat ``body``: finish with ``.for_n(n)``, ``.while_cond(cond, max_iter)`` or
        ``.until_cond(cond, max_iter)``."""
        from ._subbuilders import LoopBuilder

        return LoopBuilder(self, body)

    def map(self, body: nn.Module) -> MapBuilder:
        """Apply ``body`` per element: finish with ``.each()``, ``.over(tag)`` or
        ``.slices(n)`` (``.batched()`` first for one call on all rows)."""
        from ._subbuilders import MapBuilder

        return MapBuilder(self, body)

    def gate(self, router: nn.Module, experts: Sequence[nn.Module]) -> FlowBuilder:
        """Soft routing: ``sum_n router(x)[..., n] * experts[n](x)`` (all experts run)."""
        call = (
            f"gate({_cls(router)}, [{len(experts) if isinstance(experts, (list, tuple)) else '?'}])"
        )
        mods = self._module_list(call, "experts", experts)
        if mods is None:
            return self
        return self._attach(call, [router], lambda: Gate(router, mods))

    def switch(self, selector: nn.Module, branches: Sequence[nn.Module]) -> FlowBuilder:
        """Hard routing: only ``branches[selector(x)]`` runs, for the whole batch."""
        call = (
            f"switch({_cls(selector)}, "
            f"[{len(branches) if isinstance(branches, (list, tuple)) else '?'}])"
        )
        mods = self._module_list(call, "branches", branches)
        if mods is None:
            return self
        return self._attach(call, [selector], lambda: Switch(selector, mods))

    # -- graph-level settings ------------------------------------------------------------------

    def label(self, name: str) -> FlowBuilder:
        """A human label; a labeled graph nested in another becomes a tree child (path
        segment, submodule name)."""
        problem = check_label(name)
        if problem is not None:
            return self._fail(f"label({name!r})", problem)
        self._label = name
        return self

    def internal(self, tag: str) -> FlowBuilder:
        """Hide ``tag`` from path resolution by parent graphs (``_``-prefixed tags already are)."""
        self._internal.append(tag)
        return self

    def verbose(self, on: bool = True) -> FlowBuilder:
        """At ``build()``, print the graph's tree summary and its parameter summary."""
        self._verbose = bool(on)
        return self

    def _recording(self) -> Recording:
        """Everything recorded so far, frozen: what the planner reads."""
        return Recording(
            nodes=tuple(d.freeze() for d in self._nodes.values()),
            errors=tuple(self._errors),
            tags=MappingProxyType(dict(self._tags)),
            pending=MappingProxyType({t: tuple(ids) for t, ids in self._pending.items()}),
            groups=MappingProxyType(dict(self._groups)),
            inputs=tuple(self._inputs),
            internal=tuple(self._internal),
            streams=tuple(self._streams),
            entry=self._entry,
            label=self._label,
        )

    def build(self) -> Graph:
        """Check the recorded graph, resolve it once and return the :class:`Graph`.

        Raises :class:`~flodl_core.BuildError` listing every problem found. A builder with no
        node at all (``FlowBuilder().build()``) is an error rather than a silent identity: add
        a module (``FlowBuilder(m)`` or ``.through(m)``), or use ``torch.nn.Identity``.
        """
        from ._graph import Graph
        from ._plan import resolve

        if self._built:
            raise BuildError(["build(): this builder was already built; make a new FlowBuilder"])
        plan, errors = resolve(self._recording())
        if errors or plan is None:
            raise BuildError(errors)
        self._built = True
        graph = Graph(plan)
        if self._verbose:
            print_build_summary(graph)
        return graph
