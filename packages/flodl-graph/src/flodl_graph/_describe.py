"""Graphs as text: ``print(graph)`` (the structure) and ``graph.summary(...)`` (shapes, sizes).

``print(graph)`` lists every node in execution order with what it is and where its inputs come
from, so splits, merges, residual adds, loops, tags and nested graphs read off directly::

    Graph 'mlp' (hash 1a2b3c4d, 4 nodes, 97 parameters)
      linear_1  Linear(in_features=2, out_features=16, bias=True)  #hidden
      gelu_2    GELU(approximate='none')  <- linear_1
      linear_3  residual branch: Linear(in_features=16, out_features=16, bias=True)  <- gelu_2
      add_4     add (residual sum)  <- gelu_2, linear_3
      output: add_4
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from flodl_core import ConfigError

from ._codegen import compile_forward, generate

if TYPE_CHECKING:
    from ._graph import Graph
    from ._spec import NodeInfo


def _one_line(m: nn.Module) -> str:
    return f"{type(m).__name__}({m.extra_repr()})"


def _what(g: Graph, node: NodeInfo) -> str:
    """The node's role and module, one line."""
    from ._graph import Graph

    opts = g._plan.options.get(node.id, {})
    m = node.module
    if node.kind == "input":
        return "input"
    if node.kind == "add":
        return "add (residual sum)"
    if node.kind == "merge":
        return f"merge {getattr(opts.get('op'), 'value', opts.get('op'))}"
    if isinstance(m, Graph):
        return f"graph {m.label or '(unlabeled)'!r} ({len(m.nodes)} nodes, hash {m.short_hash()})"
    assert m is not None
    if node.kind == "loop":
        body = _one_line(m.body)  # type: ignore[arg-type]
        mode, count = m.mode, m.count  # type: ignore[union-attr]
        rule = f"for_n({count})" if mode == "for" else f"{mode}_cond (max {count})"
        return f"loop {rule}: {body}"
    if node.kind == "map":
        return f"map {m.mode}: {_one_line(m.body)}"  # type: ignore[arg-type,union-attr]
    role = {"also": "residual branch: ", "fork": "side branch: ", "split": "split branch: "}
    return role.get(node.kind, "") + _one_line(m)


def _params(m: nn.Module | None) -> int:
    return 0 if m is None else sum(p.numel() for p in m.parameters())


def render_structure(g: Graph) -> str:
    """The text ``repr(graph)`` returns."""
    nodes = g.nodes
    total = sum(p.numel() for p in g.parameters())
    title = f"Graph {g.label!r}" if g.label else "Graph"
    lines = [f"{title} (hash {g.short_hash()}, {len(nodes)} nodes, {total:,} parameters)"]
    if g.input_names:
        lines.append(f"  inputs: x, {', '.join(g.input_names)}")
    width = max(len(n.id) for n in nodes)
    for n in nodes:
        text = f"  {n.id:<{width}}  {_what(g, n)}"
        sources = [*n.inputs, *(f"{r}(ref{'; previous call' if r in n.forward_refs else ''})"
                                for r in n.refs)]  # fmt: skip
        if sources:
            text += "  <- " + ", ".join(sources)
        if n.tags:
            text += "  #" + " #".join(n.tags)
        lines.append(text)
    lines.append(f"  output: {g.output_node.id}")
    return "\n".join(lines)


def _example(spec: Any, what: str, like: Tensor | None) -> Tensor:
    """A tensor from a shape (zeros, the model's float dtype and device) or the tensor itself."""
    if isinstance(spec, Tensor):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = (spec,)
    if not isinstance(spec, (tuple, list, torch.Size)) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in spec
    ):
        raise ConfigError(
            f"summary: {what} must be a shape (a tuple of ints >= 0, batch first, e.g. (1, 784)) "
            f"or an example tensor, got {spec!r}"
        )
    kw = {} if like is None else {"dtype": like.dtype, "device": like.device}
    return torch.zeros(tuple(spec), **kw)


def render_summary(g: Graph, input: Any, inputs: dict[str, Any]) -> str:
    """Run one forward on zeros of the given shapes and tabulate every node's output shape."""
    like = next((p for p in g.parameters() if p.is_floating_point()), None)
    x = _example(input, "input_shape", like)
    unknown = sorted(set(inputs) - set(g.input_names))
    if unknown:
        raise ConfigError(
            f"summary: unknown inputs {unknown}; the graph's auxiliary inputs are "
            f"{list(g.input_names) or '(none)'}"
        )
    missing = [n for n in g.input_names if n not in inputs]
    if missing:
        raise ConfigError(f"summary: give a shape or tensor for the auxiliary inputs {missing}")
    aux = [_example(inputs[n], n, like) for n in g.input_names]
    generated = generate(g._plan, record=True)
    fn = compile_forward(generated.source, g.label)
    graphs = [m for m in g.modules() if m.__class__.__name__ == "Graph"]
    saved = [(m, dict(m._state), dict(m._tagged)) for m in graphs]  # type: ignore[attr-defined]
    modes = [(m, m.training) for m in g.modules()]
    log: dict[str, str] = {}
    g.__dict__["_shape_log"] = log
    try:
        g.eval()  # no running statistics move, no dropout
        with torch.no_grad():
            fn(g, x, *aux)
    finally:
        del g.__dict__["_shape_log"]
        for m, training in modes:
            m.training = training
        for m, state, tagged in saved:
            m._state, m._tagged = state, tagged  # type: ignore[attr-defined]
    rows = [("node", "what", "output shape", "params")]
    for n in g.nodes:
        what = _what(g, n)
        rows.append((n.id, what if len(what) <= 48 else what[:45] + "...", log.get(n.id, "-"),
                     f"{_params(n.module):,}"))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:3]) + f"  {{:>{widths[3]}}}"
    out = [fmt.format(*rows[0]), "-" * (sum(widths) + 6)]
    out += [fmt.format(*r) for r in rows[1:]]
    total = sum(p.numel() for p in g.parameters())
    trainable = sum(p.numel() for p in g.parameters() if p.requires_grad)
    out.append("-" * (sum(widths) + 6))
    out.append(
        f"total parameters: {total:,} (trainable {trainable:,}, frozen {total - trainable:,})"
    )
    return "\n".join(out)


def print_summary(
    g: Graph, input: Any, inputs: dict[str, Any], print_fn: Callable[[str], Any]
) -> None:
    print_fn(render_summary(g, input, inputs))
