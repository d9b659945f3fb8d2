"""Showcase: every graph-builder construct in one model, trained for a few steps.

The graph-builder showcase model of floDl (Rust) (split/merge, a refinement loop, a
gate with a backward ref, a switch, a recurrent memory carried across calls by a forward ref,
a while loop), plus ``also``, ``fork``, ``map`` and an auxiliary input. Run:
``./fdl run examples/showcase.py`` (``--quick`` or ``FLODL_EXAMPLE_QUICK=1``: 10 steps).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F
from torch import nn

from flodl_graph import (
    ArgmaxSelector,
    FlowBuilder,
    MergeOp,
    SoftmaxRouter,
    StateAdd,
    ThresholdHalt,
)

D = 32


def block(d: int = D) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d))


def build_model() -> nn.Module:
    encoder = nn.Sequential(nn.Linear(8, D), nn.GELU())
    refinement = FlowBuilder().also(block()).label("refine").build()
    decoder = FlowBuilder().also(nn.Linear(D, D)).through(nn.Tanh()).build()
    return (
        FlowBuilder(encoder).tag("encoded")
        .input(["context"])  # an auxiliary input: model(x, context)
        .split([block(), block(), block()]).merge(MergeOp.MEAN)
        .loop_body(refinement).for_n(3).tag("refined")
        .gate(SoftmaxRouter(D, 2), [block(), block()]).using(["encoded"])
        .switch(ArgmaxSelector(D, 2), [nn.Identity(), block()]).using(["refined"])
        .through(StateAdd()).using(["memory"])  # forward ref: the previous call's memory
        .through(nn.LayerNorm(D)).tag("memory")
        .loop_body(decoder).while_cond(ThresholdHalt(50.0), 10)
        .also(nn.Linear(D, D))
        .fork(nn.Linear(D, 1)).tag("_score")  # a side output, read with model.tagged()
        .map(nn.Linear(D // 4, D // 4)).batched().slices(4)
        .through(StateAdd()).using(["context"])
        .through(nn.Linear(D, 4))
        .build()
    )  # fmt: skip


def main(steps: int = 30) -> float:
    torch.manual_seed(0)
    model = build_model()
    print(model.code.count("\n"), "lines of generated forward;",
          sum(p.numel() for p in model.parameters()), "parameters")  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, ctx = torch.randn(16, 8), torch.randn(16, D)
    target = torch.randn(16, 4)
    loss_value = float("nan")
    t0 = time.perf_counter()
    for step in range(1, steps + 1):
        loss = F.mse_loss(model(x, ctx), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.detach_state()  # truncated BPTT: the memory keeps its value, not its history
        loss_value = loss.item()
        if step % 10 == 0 or step == 1:
            score = model.tagged("_score")
            print(f"  step {step:3d}  loss={loss_value:.4f}  score={score.mean().item():+.3f}")
    print(f"trained {steps} steps in {time.perf_counter() - t0:.2f}s")
    return loss_value


def cli(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="default 30 (--quick: 10)")
    parser.add_argument("--quick", action="store_true", help="10 steps, for a smoke run")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    steps = (10 if quick else 30) if args.steps is None else args.steps
    if steps < 1:
        parser.error(f"--steps must be 1 or more, got {steps}")
    return main(steps)


if __name__ == "__main__":
    cli()
