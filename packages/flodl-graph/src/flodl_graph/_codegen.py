"""Codegen: a :class:`Plan` becomes the Python source of a straight-line ``forward``.

Like ``torch.fx``'s codegen, the graph is resolved once: each node becomes a statement that
calls its module through ``self._modules`` (one dict read, cheaper than the attribute access
of hand-written code), loops/gates/switches/maps are emitted as code, and a value is
``del``-eted after its last use so tensors are freed as early as in hand-written code. The
profiling variant runs the same statements in level order and times every node and level.
"""

from __future__ import annotations

import hashlib
import linecache
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any

import torch

from ._annotate import note_failure
from ._spec import MergeOp, NodeInfo, Plan
from .nodes._runtime import halt, has_reset, map_each, map_slices, supports_refs, switch_index

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
    "torch": torch,
    "_halt": halt,
    "_switch": switch_index,
    "_map_each": map_each,
    "_map_slices": map_slices,
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
        self.entry_is_input = self.by_id[plan.entry].kind == "input"
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

    def call(self, node: NodeInfo, module: str, arg: str) -> str:
        if node.refs:
            return f"{module}.forward_named({arg}, {self.refs_dict(node, arg)})"
        return f"{module}({arg})"

    def node_lines(self, node: NodeInfo) -> list[str]:
        """The statements computing ``node``'s value into its variable."""
        v = node.id
        ins = [self.var[i] for i in node.inputs] or [ENTRY_PARAM]  # the entry module reads x
        mod = f"_m[{node.name!r}]"
        kind = node.kind
        if kind == "input":
            return []
        if kind == "add":
            return [f"{v} = {ins[0]} + {ins[1]}"]
        if kind == "merge":
            total = " + ".join(ins)
            if self.plan.options[v]["op"] is MergeOp.MEAN:
                return [f"{v} = ({total}) / {len(ins)}"]
            return [f"{v} = {total}"]
        if kind == "loop":
            return self.loop_lines(node, mod, ins[0])
        if kind == "gate":
            n = len(node.module.experts)  # type: ignore[union-attr]
            g = f"_g_{v}"
            experts = ", ".join(f"{g}e[{str(i)!r}]({ins[0]})" for i in range(n))
            return [
                f"{g} = {mod}._modules",
                f"{g}e = {g}['experts']._modules",
                f"{g}w = {self.call(node, f'{g}[{chr(39)}router{chr(39)}]', ins[0])}",
                f"{v} = (torch.stack(({experts}), -1) * {g}w.unsqueeze(-2)).sum(-1)",
                f"del {g}w",
            ]
        if kind == "switch":
            n = len(node.module.branches)  # type: ignore[union-attr]
            s = f"_s_{v}"
            lines = [
                f"{s} = {mod}._modules",
                f"{s}b = {s}['branches']._modules",
                f"{s}i = _switch({self.call(node, f'{s}[{chr(39)}router{chr(39)}]', ins[0])}, "
                f"{n}, {v!r})",
            ]
            for i in range(n):
                head = "if" if i == 0 else "elif" if i < n - 1 else "else"
                cond = f" {s}i == {i}" if head != "else" else ""
                lines += [f"{head}{cond}:", f"    {v} = {s}b[{str(i)!r}]({ins[0]})"]
            return lines
        if kind == "map":
            o = self.plan.options[v]
            body = f"{mod}._modules['body']"
            if o["mode"] == "slices":
                return [f"{v} = _map_slices({body}, {ins[0]}, {o['n']}, {o['batched']}, {v!r})"]
            if o["batched"]:
                return [f"{v} = {body}({ins[0]})"]
            return [f"{v} = _map_each({body}, {ins[0]})"]
        return [f"{v} = {self.call(node, mod, ins[0])}"]

    def loop_lines(self, node: NodeInfo, mod: str, arg: str) -> list[str]:
        v = node.id
        o = self.plan.options[v]
        n, mode = o["count"], o["mode"]
        body_mod = node.module.body  # type: ignore[union-attr]
        b = f"_b_{v}"
        lines = [f"{b} = {mod}._modules['body']"]
        if mode != "for":
            lines.append(f"_c_{v} = {mod}._modules['cond']")
        if has_reset(body_mod):
            lines.append(f"{b}.reset()")
        step = f"{b}({v})"
        if node.refs:
            # Refs are fixed for every iteration: build the dict once.
            lines.append(f"_r_{v} = {self.refs_dict(node, arg)}")
            step = f"{b}.forward_named({v}, _r_{v})" if supports_refs(body_mod) else step
        lines.append(f"{v} = {arg}")
        if mode == "for":
            lines += [f"for _ in range({n}):", f"    {v} = {step}"]
        elif mode == "while":
            lines += [
                f"for _ in range({n}):",
                f"    if _halt(_c_{v}({v})):",
                "        break",
                f"    {v} = {step}",
            ]
        else:
            lines += [
                f"for _i in range({n}):",
                f"    {v} = {step}",
                f"    if _i < {n - 1} and _halt(_c_{v}({v})):",
                "        break",
            ]
        return lines

    def uses(self, node: NodeInfo) -> list[str]:
        used = [self.var[i] for i in node.inputs] or [ENTRY_PARAM]
        used += [self.var[self.plan.tags[r]] for r in node.refs if r not in node.forward_refs]
        return used

    def emit(self, order: list[str], profile: bool, record: bool = False) -> Generated:
        plan = self.plan
        params = ", ".join(["self", ENTRY_PARAM, *plan.input_names])
        out = [f"def forward({params}):"]
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
        # body[i] is emitted inside the try block; owner[i] is the node it computes (if any),
        # which is how an exception is traced back to its node.
        body: list[str] = []
        owner: list[str | None] = []

        def add(lines: list[str], nid: str | None) -> None:
            body.extend(lines)
            owner.extend([nid] * len(lines))

        last_use: dict[str, int] = {}
        for i, nid in enumerate(order):
            for u in self.uses(self.by_id[nid]):
                last_use[u] = i
        output = self.var[plan.output]
        level_of = {n.id: n.level for n in plan.nodes}
        for i, nid in enumerate(order):
            node = self.by_id[nid]
            lines = self.node_lines(node)
            v = self.var[nid]
            lines += [f"_tg[{t!r}] = {v}" for t in node.tags]
            lines += [f"_st[{t!r}] = {v}" for t in node.tags if t in plan.state_tags]
            if record:
                lines.append(f"_sh[{nid!r}] = _describe({v})")
            dead = [u for u, last in last_use.items() if last == i and u != output]
            if v not in last_use and v != output and node.kind != "input":
                dead.append(v)
            if profile:
                first = i == 0 or level_of[order[i - 1]] != level_of[nid]
                last = i == len(order) - 1 or level_of[order[i + 1]] != level_of[nid]
                if first:
                    add(["_tl = _ns()"], None)
                if node.kind != "input":
                    add([f"# {nid}", "_t = _ns()"], None)
                    add(lines, nid)
                    add(["if _cuda:", "    _sync()", f"_nt[{nid!r}] = _ns() - _t"], None)
                else:
                    add(lines, nid)
                if dead:
                    add([f"del {', '.join(dict.fromkeys(dead))}"], None)
                if last:
                    add(["_lt.append(_ns() - _tl)"], None)
            else:
                add(lines, nid)
                if dead:
                    add([f"del {', '.join(dict.fromkeys(dead))}"], None)
        add([f"return {output}"], None)
        out += [f"    {line}" for line in head]
        # A try block costs nothing until something raises (zero-cost exceptions, 3.11+); the
        # handler only attaches a note naming the node, then re-raises the same exception.
        out.append("    try:")
        lines_of: dict[int, str] = {}
        for line, nid in zip(body, owner, strict=True):
            out.append(f"        {line}")
            if nid is not None:
                lines_of[len(out)] = nid
        out += ["    except Exception as _e:", "        _note(self, _e)", "        raise"]
        args = {n.id: tuple(self.uses(n)) for n in plan.nodes if n.kind != "input"}
        return Generated("\n".join(out) + "\n", lines_of, args)


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


def _source_dir() -> str | None:
    """A private per-user folder for generated sources, or None when none can be made."""
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    path = os.path.join(tempfile.gettempdir(), f"flodl-graph-{uid}")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError:
        return None
    return path


def _source_file(source: str, label: str | None) -> str | None:
    """The generated source written to a real file named by its content (written once).

    Python 3.11's default excepthook prints an uncaught exception's source lines by opening the
    frame's file (``linecache`` is not consulted), so code compiled from a string would show no
    line; a real file makes every traceback show the generated statement that failed.
    """
    folder = _source_dir()
    if folder is None:
        return None
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", label or "graph")[:40]
    path = os.path.join(folder, f"forward_{stem}_{digest}.py")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == source:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(source)
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the whole file
    except OSError:
        return None
    return path


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
