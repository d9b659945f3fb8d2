"""A residual MLP classifier built with FlowBuilder, checked against the same model by hand.

``also(block)`` adds a residual (``x + block(x)``), ``also_with(skip, main)`` one whose skip
path is a projection (``skip(x) + main(x)``, here 64 -> 32 features), and ``tag`` names each
block's output so it can be read after a forward. The script:

1. builds the graph in a Python loop (one ``also`` per block) and prints its generated forward;
2. copies its weights into the hand-written ``nn.Module`` with the same layers and checks both
   give the same output: the graph *is* that model, without the class to write;
3. trains it on two interleaved spirals and reads each block's contribution by tag.

Run with ``python examples/residual_flowbuilder.py`` (``--quick`` or ``FLODL_EXAMPLE_QUICK=1``
for a short run).
"""

from __future__ import annotations

import argparse
import math
import os

import torch
from torch import nn

import flodl_core as fc
from flodl_graph import FlowBuilder, Graph

WIDTH, NARROW, DEPTH = 64, 32, 4


def block(width: int) -> nn.Module:
    """Pre-norm residual branch: (B, width) -> (B, width)."""
    return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.GELU())


def build_graph() -> Graph:
    """(B, 2) -> (B, 2) logits: stem, DEPTH residual blocks, a projected residual, head."""
    b = FlowBuilder(nn.Linear(2, WIDTH)).through(nn.GELU())
    for i in range(DEPTH):
        b = b.also(block(WIDTH)).tag(f"block{i}")
    b = b.also_with(nn.Linear(WIDTH, NARROW), nn.Sequential(block(WIDTH), nn.Linear(WIDTH, NARROW)))
    return b.tag("narrow").through(nn.LayerNorm(NARROW)).through(nn.Linear(NARROW, 2)).build()


class HandWritten(nn.Module):
    """The same model as ``build_graph()``, written as a PyTorch class."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(2, WIDTH)
        self.blocks = nn.ModuleList(block(WIDTH) for _ in range(DEPTH))
        self.skip = nn.Linear(WIDTH, NARROW)
        self.main = nn.Sequential(block(WIDTH), nn.Linear(WIDTH, NARROW))
        self.norm = nn.LayerNorm(NARROW)
        self.head = nn.Linear(NARROW, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.gelu(self.stem(x))
        for blk in self.blocks:
            x = x + blk(x)
        x = self.skip(x) + self.main(x)
        return self.head(self.norm(x))


def spirals(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved spirals: x: (n, 2), y: (n,) in {0, 1}."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 2, (n,), generator=g)
    t = torch.rand(n, generator=g) * 3 * math.pi + 0.5
    angle = t + y * math.pi
    x = torch.stack([t * torch.cos(angle), t * torch.sin(angle)], dim=1) / (3 * math.pi)
    return x + 0.02 * torch.randn(n, 2, generator=g), y


def check_parity(graph: Graph) -> None:
    """Same weights, same output: the graph and the hand-written class compute the same thing."""
    hand = HandWritten()
    graph_params = list(graph.parameters())
    hand_params = list(hand.parameters())
    assert [p.shape for p in graph_params] == [p.shape for p in hand_params]
    with torch.no_grad():
        for mine, theirs in zip(hand_params, graph_params, strict=True):
            mine.copy_(theirs)
    x = torch.randn(16, 2)
    torch.testing.assert_close(graph(x), hand(x), rtol=0, atol=1e-6)
    print(f"  parity with the hand-written model: {len(graph_params)} tensors, same output")


def main(argv: list[str] | None = None) -> float:
    """Returns the validation accuracy."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 40 (--quick: 8)")
    parser.add_argument("--quick", action="store_true", help="fewer epochs, for a smoke run")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    epochs = (8 if quick else 40) if args.epochs is None else args.epochs
    if epochs < 1:
        parser.error(f"--epochs must be 1 or more, got {epochs}")

    fc.manual_seed(0)
    model = build_graph()
    print(model.code)
    check_parity(model)

    x, y = spirals(2048, seed=1)
    val_x, val_y = spirals(512, seed=2)
    loader = fc.DataLoader((x, y), batch_size=64, names=["x", "y"])
    opt = fc.AdamW(model, lr=3e-3, weight_decay=1e-4)
    schedule = fc.Warmup(fc.Cosine(3e-3, total=epochs * len(loader)), warmup_steps=20)
    step = 0
    for epoch in range(epochs):
        model.train()
        for batch in loader.epoch(epoch):
            schedule.apply(opt, step)
            loss = fc.cross_entropy_loss(model(batch["x"]), batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
        if (epoch + 1) % max(1, epochs // 4) == 0:
            print(f"  epoch {epoch + 1:3d}/{epochs}  loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        accuracy = float((model(val_x).argmax(1) == val_y).float().mean())
        # After a forward, every tagged value can be read: how much each block changes x.
        sizes = [float(model.tagged(f"block{i}").norm(dim=1).mean()) for i in range(DEPTH)]
    print("  mean |x| after each residual block:", [round(s, 2) for s in sizes])
    print(f"  spirals: val accuracy {accuracy:.3f}")
    assert accuracy > 0.75, accuracy  # two classes: chance is 0.5
    return accuracy


if __name__ == "__main__":
    main()
