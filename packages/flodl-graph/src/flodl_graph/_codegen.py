"""Codegen: a :class:`Plan` becomes the Python source of a straight-line ``forward``.

Like ``torch.fx``'s codegen, the graph is resolved once: each node becomes a statement that
calls its module through ``self._modules`` (one dict read, cheaper than the attribute access
of hand-written code), loops/gates/switches/maps are emitted as code, and a value is
``del``-eted after its last use so tensors are freed as early as in hand-written code. The
profiling variant runs the same statements in level order and times every node and level.
"""

from __future__ import annotations

import itertools
import linecache
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import torch

from ._spec import MergeOp, NodeInfo, Plan
from .nodes._runtime import halt, has_reset, map_each, map_slices, supports_refs, switch_index

ENTRY_PARAM = "x"
_serial = itertools.count(1)


def _sync() -> None:
    torch.cuda.synchronize()


_GLOBALS: dict[str, Any] = {
    "torch": torch,
    "_halt": halt,
    "_switch": switch_index,
    "_map_each": map_each,
    "_map_slices": map_slices,
    "_ns": perf_counter_ns,
    "_sync": _sync,
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

    def emit(self, order: list[str], profile: bool) -> str:
        plan = self.plan
        params = ", ".join(["self", ENTRY_PARAM, *plan.input_names])
        out = [f"def forward({params}):"]
        body: list[str] = ["_m = self._modules"]
        if plan.tags:
            body += ["_tg = self._tagged", "_tg.clear()"]
        if plan.state_tags:
            body.append("_st = self._state")
            # Forward refs read the previous call's values before anything is written.
            body += [f"{self.fr[t]} = _st[{t!r}]" for t in plan.state_tags]
        if profile:
            body += [
                "_nt = self._node_times",
                "_nt.clear()",
                "_lt = self._level_times",
                "_lt.clear()",
                f"_cuda = getattr({ENTRY_PARAM}, 'is_cuda', False)",
            ]
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
            dead = [u for u, last in last_use.items() if last == i and u != output]
            if v not in last_use and v != output and node.kind != "input":
                dead.append(v)
            if profile:
                first = i == 0 or level_of[order[i - 1]] != level_of[nid]
                last = i == len(order) - 1 or level_of[order[i + 1]] != level_of[nid]
                if first:
                    body.append("_tl = _ns()")
                if node.kind != "input":
                    body += [
                        f"# {nid}",
                        "_t = _ns()",
                        *lines,
                        "if _cuda:",
                        "    _sync()",
                        f"_nt[{nid!r}] = _ns() - _t",
                    ]
                else:
                    body += lines
                if dead:
                    body.append(f"del {', '.join(dict.fromkeys(dead))}")
                if last:
                    body.append("_lt.append(_ns() - _tl)")
            else:
                body += lines
                if dead:
                    body.append(f"del {', '.join(dict.fromkeys(dead))}")
        body.append(f"return {output}")
        out += [f"    {line}" for line in body]
        return "\n".join(out) + "\n"


def generate(plan: Plan, profile: bool = False) -> str:
    """The source of ``forward(self, x, *aux_inputs)`` for ``plan``."""
    em = _Emitter(plan)
    if profile:
        order = [nid for level in plan.levels for nid in level]
    else:
        order = [n.id for n in plan.nodes]
    return em.emit(order, profile)


def compile_forward(source: str, label: str | None) -> Callable[..., Any]:
    """Compile ``source`` once; register it with ``linecache`` so tracebacks show the lines."""
    filename = f"<flodl-graph {label or 'graph'} #{next(_serial)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = dict(_GLOBALS)
    exec(compile(source, filename, "exec"), namespace)
    return namespace["forward"]
