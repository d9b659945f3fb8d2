"""The loop node: a body applied repeatedly, with backpropagation through the unrolled steps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from torch import Tensor, nn

from .._spec import NodeKind
from ._protocol import CompositeNode, EmitContext
from ._runtime import has_reset
from ._traces import LoopBody, TraceEmit

LoopMode = Literal["for", "while", "until"]

_RULES = {"for": "for_n", "while": "while_cond", "until": "until_cond"}


class Loop(CompositeNode):
    """Runs ``body`` on its own output: ``state = body(state)``.

    - ``mode="for"``: exactly ``count`` iterations.
    - ``mode="while"``: before each iteration, halt if ``cond(state)[0] > 0``; 0..count runs.
    - ``mode="until"``: after each iteration but the last allowed one, halt if
      ``cond(state)[0] > 0``; 1..count runs.

    ``body.reset()`` (when defined) is called once before iterating. Refs, when given, are the
    same for every iteration and reach the body through ``forward_named``. The condition sees
    only the state; its decision is read to the host, so no gradient flows through it. A body
    deriving from :class:`LoopBody` runs through ``step(state, refs, emit)`` and its published
    values are this call's :attr:`traces`. state: (B, ...) -> (B, ...).
    """

    kind = NodeKind.LOOP
    refs_role = "loop body"

    def __init__(
        self,
        body: nn.Module,
        mode: LoopMode,
        count: int,
        cond: nn.Module | None = None,
        node: str = "loop",
    ) -> None:
        super().__init__()
        self.body = body
        if cond is not None:
            self.cond = cond
        self.mode: LoopMode = mode
        self.count = count
        self.node = node
        self._traces: dict[str, list[Tensor]] = {}

    @property
    def traces(self) -> dict[str, list[Tensor]]:
        """What a :class:`LoopBody` body published in the last call: name -> one value per
        iteration that published it (empty for other bodies and before any call)."""
        return self._traces

    def start_traces(self, node: str) -> TraceEmit:
        """Forget the previous call's traces and return the emit of this call."""
        self._traces = {}
        return TraceEmit(self._traces, node)

    def detach_state(self) -> None:
        """Cut the autograd history of the kept traces (``Graph.detach_state``, ``end_step``),
        so they keep no step's graph alive."""
        self._traces = {k: [v.detach() for v in vs] for k, vs in self._traces.items()}

    def __getstate__(self) -> dict[str, Any]:
        # Traces are per-call values (like tagged outputs): copies and pickles start without.
        state = super().__getstate__()
        state["_traces"] = {}
        return state

    def refs_target(self) -> nn.Module:
        return self.body

    def emit(self, ctx: EmitContext, out: str, args: Sequence[str]) -> list[str]:
        n, mode, body = self.count, self.mode, self.body
        b, c = ctx.tmp("b"), ctx.tmp("c")
        lines = [f"{b} = {ctx.sub('body')}"]
        if mode != "for":
            lines.append(f"{c} = {ctx.sub('cond')}")
        if has_reset(body):
            lines.append(f"{b}.reset()")
        refs = None
        if ctx.refs is not None:
            # Refs are fixed for every iteration: build the dict once.
            refs = ctx.tmp("r")
            lines.append(f"{refs} = {ctx.refs}")
        if isinstance(body, LoopBody):
            e = ctx.tmp("e")
            if refs is None:
                refs = ctx.tmp("r")
                lines.append(f"{refs} = {{}}")
            lines.append(f"{e} = {ctx.module}.start_traces({ctx.node!r})")
            step = f"{e}.run_step({b}, {out}, {refs})"
        elif refs is not None:
            step = f"{b}.forward_named({out}, {refs})"
        else:
            step = f"{b}({out})"
        lines.append(f"{out} = {args[0]}")
        if mode == "for":
            return [*lines, f"for _ in range({n}):", f"    {out} = {step}"]
        if mode == "while":
            check = [f"    if _halt({c}({out}), {ctx.node!r}):", "        break"]
            return [*lines, f"for _ in range({n}):", *check, f"    {out} = {step}"]
        check = [f"    if _i < {n - 1} and _halt({c}({out}), {ctx.node!r}):", "        break"]
        return [*lines, f"for _i in range({n}):", f"    {out} = {step}", *check]

    def extra_repr(self) -> str:
        return f"{_RULES[self.mode]}({self.count})"
