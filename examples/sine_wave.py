"""Sine-wave regression: a training loop with the monitor, then a checkpoint round trip.

A small FlowBuilder MLP learns ``y = sin(x)`` on ``[-π, π]`` from noisy samples. Each epoch is
one line on the console; the best model (by validation loss) is saved as a ``.fdl`` checkpoint,
loaded back into a freshly built graph, and checked to predict exactly as the trained one.

Run with ``python examples/sine_wave.py`` (``--quick`` or ``FLODL_EXAMPLE_QUICK=1`` for a few
epochs); ``--out DIR`` chooses where the checkpoint goes (default ``runs/sine_wave``).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path

import torch

import flodl_core as fc
from flodl_graph import FlowBuilder, Graph
from flodl_monitor import Monitor


def make_data(n: int, noise: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x: (n, 1) uniform on [-π, π]; y: (n, 1) = sin(x) + noise."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, 1, generator=g) * 2 - 1) * math.pi
    return x, torch.sin(x) + noise * torch.randn(n, 1, generator=g)


def build_model(width: int = 32) -> Graph:
    """(B, 1) -> (B, 1): two tanh layers with a residual in between."""
    return (
        FlowBuilder(fc.Linear(1, width))
        .through(fc.Tanh())
        .also(fc.Sequential(fc.Linear(width, width), fc.Tanh()))  # x + f(x)
        .through(fc.Linear(width, 1))
        .build()
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 60 (--quick: 12)")
    parser.add_argument("--quick", action="store_true", help="a few epochs, for a smoke run")
    parser.add_argument("--out", type=Path, default=Path("runs/sine_wave"))
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be 1 or more, got {args.epochs}")
    return args


def val_mse(model: Graph, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean squared error of ``model`` on (x, y), in eval mode without gradients."""
    model.eval()
    with torch.no_grad():
        return float(fc.mse_loss(model(x), y))


def reload_and_check(
    checkpoint: Path, val_x: torch.Tensor, val_y: torch.Tensor, best: float
) -> float:
    """The round trip: a freshly built graph (same structure, so the same hash) takes the file
    and must predict exactly as the saved one did. Returns its validation MSE."""
    restored = build_model()
    restored.load_checkpoint(checkpoint)
    reloaded = val_mse(restored, val_x, val_y)
    print(f"  best checkpoint: {checkpoint}  val MSE {best:.5f}; reloaded: {reloaded:.5f}")
    assert abs(reloaded - best) <= 1e-6 * max(1.0, best), "reloaded model predicts differently"
    probe = torch.tensor([[-math.pi / 2], [0.0], [math.pi / 2]])
    with torch.no_grad():
        print("  sin(-π/2, 0, π/2) ≈", [round(v, 3) for v in restored(probe).flatten().tolist()])
    return reloaded


def main(argv: list[str] | None = None) -> float:
    """Train, checkpoint and reload; returns the reloaded model's validation MSE."""
    args = parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    epochs = (12 if quick else 60) if args.epochs is None else args.epochs

    fc.manual_seed(0)
    train_x, train_y = make_data(1024, noise=0.05, seed=1)
    val_x, val_y = make_data(256, noise=0.0, seed=2)
    loader = fc.DataLoader((train_x, train_y), batch_size=32, names=["x", "y"])

    model = build_model()
    opt = fc.Adam(model.parameters(), lr=1e-2)
    schedule = fc.Cosine(1e-2, total=epochs * len(loader), min_lr=1e-4)
    checkpoint = args.out / "best.fdl"
    args.out.mkdir(parents=True, exist_ok=True)

    monitor = Monitor(epochs)
    best = math.inf
    step = 0
    for epoch in range(epochs):
        t0 = time.perf_counter()
        model.train()
        for batch in loader.epoch(epoch):
            schedule.apply(opt, step)
            loss = fc.mse_loss(model(batch["x"]), batch["y"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            model.record_scalar("loss", loss.item())
            step += 1
        val = val_mse(model, val_x, val_y)
        model.record_scalar("val", val)
        model.record_scalar("lr", opt.lr())
        model.flush()
        if val < best:  # keep the best epoch, not the last
            best = val
            model.save_checkpoint(checkpoint, metadata={"epoch": str(epoch + 1)})
        monitor.log(epoch, time.perf_counter() - t0, model)
    monitor.finish()

    return reload_and_check(checkpoint, val_x, val_y, best)


if __name__ == "__main__":
    main()
