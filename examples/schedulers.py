"""Schedulers: linear warmup into cosine decay, capped by a plateau detector.

The step schedule sets the lr every batch; the plateau watches the validation loss once per
epoch and, when it stops improving, lowers a ceiling the step schedule cannot exceed:

    lr(step) = min(Warmup(Cosine).lr(step), Plateau.lr())

Run with ``python examples/schedulers.py`` (``--quick`` or ``FLODL_EXAMPLE_QUICK=1`` for 12
epochs); prints one line per epoch.
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn

import flodl_core as fc


def main(epochs: int = 40, batch_size: int = 64) -> list[tuple[int, float, float]]:
    """Train a small regressor; returns ``(epoch, lr at epoch end, validation loss)`` rows."""
    fc.manual_seed(0)
    x = torch.randn(640, 8)
    # Noise puts a floor under the loss, so the validation curve flattens and the plateau acts.
    y = (x[:, :4].sum(dim=1, keepdim=True)).tanh() + 0.3 * torch.randn(640, 1)
    x_train, y_train, x_val, y_val = x[:512], y[:512], x[512:], y[512:]
    model = nn.Sequential(nn.Linear(8, 32), fc.GELU(), nn.Linear(32, 1))

    steps_per_epoch = len(x_train) // batch_size
    total = epochs * steps_per_epoch
    warmup = total // 10
    peak = 3e-2
    schedule = fc.Warmup(fc.Cosine(peak, total=total - warmup, min_lr=1e-4), warmup)
    plateau = fc.Plateau(peak, patience=2, factor=0.5, min_lr=1e-4)
    lr_at = fc.MinOf(schedule, plateau)
    opt = fc.AdamW(model.parameters(), lr=peak, weight_decay=1e-4)

    history: list[tuple[int, float, float]] = []
    step = 0
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(len(x_train))
        for i in range(0, len(x_train) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]
            opt.set_lr(lr_at.lr(step))
            loss = fc.mse_loss(model(x_train[idx]), y_train[idx])
            opt.zero_grad()
            loss.backward()
            fc.clip_grad_norm(model, 1.0)
            opt.step()
            step += 1
        model.eval()
        with torch.no_grad():
            val = float(fc.mse_loss(model(x_val), y_val))
        plateau.observe(val)
        lr = opt.lr()
        history.append((epoch, lr, val))
        print(
            f"  epoch {epoch:3d}/{epochs}  lr={lr:.2e}  ceiling={plateau.lr():.2e}  val={val:.4f}"
        )
    return history


def cli(argv: list[str] | None = None) -> list[tuple[int, float, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 40 (--quick: 12)")
    parser.add_argument("--quick", action="store_true", help="12 epochs, for a smoke run")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    epochs = (12 if quick else 40) if args.epochs is None else args.epochs
    if epochs < 1:
        parser.error(f"--epochs must be 1 or more, got {epochs}")
    return main(epochs=epochs)


if __name__ == "__main__":
    cli()
