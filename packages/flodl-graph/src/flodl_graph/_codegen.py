"""Codegen: a :class:`Plan` becomes the Python source of a straight-line ``forward``.

Like ``torch.fx``'s codegen, the graph is resolved once: each node becomes a statement that
calls its module through ``self._modules`` (one dict read, cheaper than the attribute access
of hand-written code), loops/gates/switches/maps emit their own statements (see
``nodes._protocol``), and a value is
``del``-eted after its last use so tensors are freed as early as in hand-written code. The
profiling variant runs the same statements in level order and times every node and level.
"""

from __future__ import annotations

import hashlib
import linecache
import re
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import torch

from ._annotate import note_failure
from ._sourcedir import source_dir, write_source
from ._spec import MergeOp, NodeInfo, NodeKind, Plan
from .nodes._protocol import RUNTIME_GLOBALS, CompositeNode, EmitContext

ENTRY_PARAM = "x"


@dataclass(frozen=True)
class Generated:
    """A generated forward: its source, and which node each source line (1-based) computes."""

    source: str
    line_nodes: dict[int, str]
    node_args: dict[str, tuple[str, ...]]  # node id -> the local names it reads


def _sync() -> None:
    torch.cuda.synchronize()


def describe_value(v: Any) -> str:
    """A node output as the summary shows it: ``[3, 16]`` for a tensor."""
    if isinstance(v, torch.Tensor):
        return str(list(v.shape))
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(describe_value(x) for x in v) + ")"
    return type(v).__name__


_GLOBALS: dict[str, Any] = {
    **RUNTIME_GLOBALS,
    "_ns": perf_counter_ns,
    "_sync": _sync,
    "_note": note_failure,
    "_describe": describe_value,
}


class _Emitter:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.by_id = {n.id: n for n in plan.nodes}
        self.var: dict[str, str] = {n.id: n.id for n in plan.nodes}
        self.entry_is_input = self.by_id[plan.entry].kind is NodeKind.INPUT
        if self.entry_is_input:
            self.var[plan.entry] = ENTRY_PARAM
        for name, nid in zip(plan.input_names, plan.input_nodes, strict=True):
            self.var[nid] = name
        # Tags may hold '-': state locals are numbered instead of named.
        self.fr = {t: f"_fr{i}" for i, t in enumerate(plan.state_tags)}

    def ref_expr(self, node: NodeInfo, ref: str, primary: str) -> str:
        if ref in node.forward_refs:
            # Nothing written yet (first call, after reset_state): zeros shaped like the
            # primary input, outside autograd.
            fr = self.fr[ref]
            return f"({fr} if {fr} is not None else torch.zeros_like({primary}))"
        return self.var[self.plan.tags[ref]]

    def refs_dict(self, node: NodeInfo, primary: str) -> str:
        items = ", ".join(f"{r!r}: {self.ref_expr(node, r, primary)}" for r in node.refs)
        return "{" + items + "}"

    def node_lines(self, node: NodeInfo) -> list[str]:
        """The statements computing ``node``'s value into its variable.

        Codegen writes inputs, residual sums, merges and plain module calls itself; a composite
        node (loop, gate, switch, map) writes its own statements (``CompositeNode.emit``).
        """
        v = node.id
        ins = [self.var[i] for i in node.inputs] or [ENTRY_PARAM]  # the entry module reads x
        kind = node.kind
        if kind is NodeKind.INPUT:
            return []
        if kind is NodeKind.ADD:
            return [f"{v} = {ins[0]} + {ins[1]}"]
        if kind is NodeKind.MERGE:
            total = " + ".join(ins)
            if self.plan.options[v]["op"] is MergeOp.MEAN:
                return [f"{v} = ({total}) / {len(ins)}"]
            return [f"{v} = {total}"]
        mod = f"_m[{node.name!r}]"
        refs = self.refs_dict(node, ins[0]) if node.refs else None
        if isinstance(node.module, CompositeNode):
            return node.module.emit(EmitContext(node.id, mod, refs), v, ins)
        if refs is not None:
            return [f"{v} = {mod}.forward_named({ins[0]}, {refs})"]
        return [f"{v} = {mod}({ins[0]})"]

    def uses(self, node: NodeInfo) -> list[str]:
        used = [self.var[i] for i in node.inputs] or [ENTRY_PARAM]
        used += [self.var[self.plan.tags[r]] for r in node.refs if r not in node.forward_refs]
        return used

    def head(self, profile: bool, record: bool) -> list[str]:
        """The statements before the try block: module dict, tag and state stores, timers."""
        plan = self.plan
        head: list[str] = ["_m = self._modules"]
        if plan.tags:
            head += ["_tg = self._tagged", "_tg.clear()"]
        if plan.state_tags:
            head.append("_st = self._state")
            # Forward refs read the previous call's values before anything is written.
            head += [f"{self.fr[t]} = _st[{t!r}]" for t in plan.state_tags]
        if profile:
            head += [
                "_nt = self._node_times",
                "_nt.clear()",
                "_lt = self._level_times",
                "_lt.clear()",
                f"_cuda = getattr({ENTRY_PARAM}, 'is_cuda', False)",
            ]
        if record:  # Graph.summary: every node's output, described, into self._shape_log
            head.append("_sh = self._shape_log")
        return head

    def stored_lines(self, node: NodeInfo, record: bool) -> list[str]:
        """``node``'s statements, then the stores of its value (tags, state, shape log)."""
        v = self.var[node.id]
        lines = self.node_lines(node)
        lines += [f"_tg[{t!r}] = {v}" for t in node.tags]
        lines += [f"_st[{t!r}] = {v}" for t in node.tags if t in self.plan.state_tags]
        if record:
            lines.append(f"_sh[{node.id!r}] = _describe({v})")
        return lines

    def emit(self, order: list[str], profile: bool, record: bool = False) -> Generated:
        """The whole ``forward`` for nodes in ``order`` (timed per node/level if ``profile``)."""
        plan = self.plan
        body = _Body()
        last_use: dict[str, int] = {}
        for i, nid in enumerate(order):
            for u in self.uses(self.by_id[nid]):
                last_use[u] = i
        output = self.var[plan.output]
        level_of = {n.id: n.level for n in plan.nodes}
        for i, nid in enumerate(order):
            node = self.by_id[nid]
            lines = self.stored_lines(node, record)
            v = self.var[nid]
            # Free every value whose last reader this node is, and an unread value at once.
            dead = [u for u, last in last_use.items() if last == i and u != output]
            if v not in last_use and v != output and node.kind is not NodeKind.INPUT:
                dead.append(v)
            if profile and (i == 0 or level_of[order[i - 1]] != level_of[nid]):
                body.add(["_tl = _ns()"], None)
            if profile and node.kind is not NodeKind.INPUT:
                body.add([f"# {nid}", "_t = _ns()"], None)
                body.add(lines, nid)
                body.add(["if _cuda:", "    _sync()", f"_nt[{nid!r}] = _ns() - _t"], None)
            else:
                body.add(lines, nid)
            if dead:
                body.add([f"del {', '.join(dict.fromkeys(dead))}"], None)
            if profile and (i == len(order) - 1 or level_of[order[i + 1]] != level_of[nid]):
                body.add(["_lt.append(_ns() - _tl)"], None)
        body.add([f"return {output}"], None)
        params = ", ".join(["self", ENTRY_PARAM, *plan.input_names])
        source, lines_of = body.source(params, self.head(profile, record))
        args = {n.id: tuple(self.uses(n)) for n in plan.nodes if n.kind is not NodeKind.INPUT}
        return Generated(source, lines_of, args)


class _Body:
    """The statements of the try block, each with the node it computes (if any): how an
    exception is traced back to its node."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.owner: list[str | None] = []

    def add(self, lines: list[str], nid: str | None) -> None:
        self.lines.extend(lines)
        self.owner.extend([nid] * len(lines))

    def source(self, params: str, head: list[str]) -> tuple[str, dict[int, str]]:
        """(the source of ``forward(params)``, source line (1-based) -> node id)."""
        out = [f"def forward({params}):", *(f"    {line}" for line in head)]
        # A try block costs nothing until something raises (zero-cost exceptions, 3.11+); the
        # handler only attaches a note naming the node, then re-raises the same exception.
        out.append("    try:")
        lines_of: dict[int, str] = {}
        for line, nid in zip(self.lines, self.owner, strict=True):
            out.append(f"        {line}")
            if nid is not None:
                lines_of[len(out)] = nid
        out += ["    except Exception as _e:", "        _note(self, _e)", "        raise"]
        return "\n".join(out) + "\n", lines_of


def generate(plan: Plan, profile: bool = False, record: bool = False) -> Generated:
    """The source of ``forward(self, x, *aux_inputs)`` for ``plan``, with its line -> node map.

    ``record`` adds, after each node, a line storing a description of its output (its shape)
    in ``self._shape_log``: the variant :meth:`Graph.summary` runs once.
    """
    em = _Emitter(plan)
    if profile:
        order = [nid for level in plan.levels for nid in level]
    else:
        order = [n.id for n in plan.nodes]
    return em.emit(order, profile, record)


def _source_file(source: str, label: str | None) -> str | None:
    """The generated source written to a real file named by its content (written once).

    Python 3.11's default excepthook prints an uncaught exception's source lines by opening the
    frame's file (``linecache`` is not consulted), so code compiled from a string would show no
    line; a real file makes every traceback show the generated statement that failed. The
    folder is checked and the file written without following symlinks (``_sourcedir``).
    """
    folder = source_dir()
    if folder is None:
        return None
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", label or "graph")[:40]
    return write_source(folder, f"forward_{stem}_{digest}.py", source)


def compile_forward(source: str, label: str | None) -> Callable[..., Any]:
    """Compile ``source`` once, under a file name that tracebacks can show lines from.

    The source also goes into ``linecache`` (with no mtime, so ``checkcache`` keeps it): the
    ``traceback`` module and debuggers find the lines even if the file is later removed.
    """
    path = _source_file(source, label)
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    filename = path or f"<flodl-graph {label or 'graph'} {digest}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(_GLOBALS)
    exec(compile(source, filename, "exec"), namespace)
    return namespace["forward"]
