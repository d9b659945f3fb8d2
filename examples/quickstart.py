"""Quickstart: train a small residual MLP on a synthetic regression task.

Run with ``./fdl run``. Prints one line per epoch.
"""

from __future__ import annotations

import time

import torch
from torch import nn

import flodl_core as fc


def main(epochs: int = 10) -> float:
    fc.manual_seed(0)
    x = torch.randn(512, 2)
    y = torch.stack([x[:, 0] * x[:, 1], x[:, 0] - x[:, 1]], dim=1)
    model = nn.Sequential(nn.Linear(2, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_value = float("nan")
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        for i in range(0, len(x), 64):
            pred = model(x[i : i + 64])
            loss = nn.functional.mse_loss(pred, y[i : i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_value = loss.item()
        ms = (time.perf_counter() - t0) * 1e3
        print(f"  epoch {epoch:3d}/{epochs}  loss={loss_value:.4f}  [{ms:.0f}ms]")
    return loss_value


if __name__ == "__main__":
    main()
