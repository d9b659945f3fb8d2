"""The loop node: a body applied repeatedly, with backpropagation through the unrolled steps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from torch import Tensor, nn

from ._runtime import call_refs, halt, has_reset

LoopMode = Literal["for", "while", "until"]


class Loop(nn.Module):
    """Runs ``body`` on its own output: ``state = body(state)``.

    - ``mode="for"``: exactly ``count`` iterations.
    - ``mode="while"``: before each iteration, halt if ``cond(state)[0] > 0``; 0..count runs.
    - ``mode="until"``: after each iteration but the last allowed one, halt if
      ``cond(state)[0] > 0``; 1..count runs.

    ``body.reset()`` (when defined) is called once before iterating. Refs, when given, are the
    same for every iteration and reach the body through ``forward_named``. The condition sees
    only the state; its decision is read to the host, so no gradient flows through it.

    Inside a graph the loop is emitted as inline code; this ``forward`` is the same semantics
    for standalone use. state: (B, ...) -> (B, ...).
    """

    def __init__(
        self, body: nn.Module, mode: LoopMode, count: int, cond: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.body = body
        if cond is not None:
            self.cond = cond
        self.mode: LoopMode = mode
        self.count = count

    def forward(self, x: Tensor, refs: Mapping[str, Tensor] | None = None) -> Tensor:
        body = self.body
        if has_reset(body):
            body.reset()
        state = x
        if self.mode == "for":
            for _ in range(self.count):
                state = call_refs(body, state, refs)
        elif self.mode == "while":
            for _ in range(self.count):
                if halt(self.cond(state)):
                    break
                state = call_refs(body, state, refs)
        else:
            for i in range(self.count):
                state = call_refs(body, state, refs)
                if i < self.count - 1 and halt(self.cond(state)):
                    break
        return state

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        return self.forward(x, refs)

    def extra_repr(self) -> str:
        what = {"for": "for_n", "while": "while_cond", "until": "until_cond"}[self.mode]
        return f"{what}({self.count})"
