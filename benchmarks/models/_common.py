"""What every benchmark model provides: two builders (flodl graph, hand-written module) that
draw the same initial weights, the data, and the loss; and the builders of the model families
(layer chains, refinement loops, recurrent models) that several models share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flodl_graph import FlowBuilder


@dataclass(frozen=True)
class Bench:
    """One benchmark model, written twice.

    ``flodl()`` and ``hand()`` create their layers in the same order, so under the same seed
    they start from identical weights; ``data(batch)`` returns ``(input, target)``.
    """

    name: str
    spec: str
    flodl: Callable[[], nn.Module]
    hand: Callable[[], nn.Module]
    data: Callable[[int], tuple[Tensor, Tensor]]
    batch: int
    loss: Callable[[Tensor, Tensor], Tensor] = F.mse_loss
    compile_ok: bool = True

    def make(self, side: str, seed: int = 0) -> nn.Module:
        torch.manual_seed(seed)
        return self.flodl() if side == "flodl" else self.hand()


def randn(*shape: int, seed: int = 1) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class LastStep(nn.Module):
    """The last time step of a fused RNN's output: ((B, T, H), state) -> (B, H)."""

    def forward(self, out: tuple[Tensor, object]) -> Tensor:
        return out[0][:, -1]


def block(d: int) -> nn.Sequential:
    """Linear -> GELU -> LayerNorm, the unit of the residual and loop models."""
    return nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))


def spec_of(doc: str | None) -> str:
    """The sizes line of a model module's docstring: its first paragraph after ``name: ``."""
    first = " ".join((doc or "").split("\n\n")[0].split())
    return first.split(": ", 1)[1] if ": " in first else first


def pair_data(
    *shape: int, target: tuple[int, ...] | None = None
) -> Callable[[int], tuple[Tensor, Tensor]]:
    """``data(batch)`` for a model mapping (B, *shape) to (B, *target): two seeded normals."""
    out = shape if target is None else target
    return lambda b: (randn(b, *shape), randn(b, *out, seed=2))


class Stack(nn.Module):
    """The hand-written side of a layer chain: an ``nn.Sequential`` of the layers."""

    def __init__(self, layers: list[nn.Module]) -> None:
        super().__init__()
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


def chain(layers: list[nn.Module]) -> nn.Module:
    """The flodl side of a layer chain: ``FlowBuilder(first).through(...)`` for the rest."""
    first, *rest = layers
    fb = FlowBuilder(first)
    for m in rest:
        fb = fb.through(m)
    return fb.build()


def chain_bench(
    name: str,
    doc: str | None,
    layers: Callable[[], list[nn.Module]],
    data: Callable[[int], tuple[Tensor, Tensor]],
    batch: int,
) -> Bench:
    """A model that is a plain chain of ``layers()``, as a graph and as ``nn.Sequential``."""
    return Bench(name, spec_of(doc), lambda: chain(layers()), lambda: Stack(layers()), data, batch)


class RefineLoop(nn.Module):
    """The hand-written refinement loop: ``h = inp(x)``, ``steps`` x ``h = h + body(h)``, out."""

    def __init__(self, d: int, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.inp = block(d)
        self.body = block(d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        h = self.inp(x)
        for _ in range(self.steps):
            h = h + self.body(h)
        return self.out(h)


def refine_bench(name: str, doc: str | None, d: int, steps: int, batch: int) -> Bench:
    """block(d), ``loop_body(also(block(d))).for_n(steps)``, Linear(d, d) on (B, d) data."""

    def flodl() -> nn.Module:
        inp = block(d)
        body = FlowBuilder().also(block(d)).build()
        return FlowBuilder(inp).loop_body(body).for_n(steps).through(nn.Linear(d, d)).build()

    return Bench(name, spec_of(doc), flodl, lambda: RefineLoop(d, steps), pair_data(d), batch)


class LastStepHead(nn.Module):
    """The hand-written recurrent model: a fused RNN, then ``head`` on its last time step."""

    def __init__(self, rnn: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.rnn = rnn
        self.head = head

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def rnn_bench(
    name: str,
    doc: str | None,
    rnn: Callable[[], nn.Module],
    hidden: int,
    features: int,
    steps: int,
    batch: int,
) -> Bench:
    """``rnn()`` over (B, steps, features), Linear(hidden, features) on the last step."""

    def flodl() -> nn.Module:
        fb = FlowBuilder(rnn()).through(LastStep())
        return fb.through(nn.Linear(hidden, features)).build()

    def hand() -> nn.Module:
        return LastStepHead(rnn(), nn.Linear(hidden, features))

    data = pair_data(steps, features, target=(features,))
    return Bench(name, spec_of(doc), flodl, hand, data, batch)
