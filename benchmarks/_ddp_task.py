"""The classification task both distributed benchmarks train (`ddp_hetero.py`, `ddp_comm.py`).

Spawned ranks import the benchmark script, which imports this module from the same folder, so
the factories they receive build the same model on every rank.
"""

from __future__ import annotations

import time

import torch
from torch import nn

IN, CLASSES = 64, 10


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``(n, 64)`` and labels ``(n,)`` from a fixed random teacher network."""
    g = torch.Generator().manual_seed(1234)
    teacher = torch.randn(IN, CLASSES, generator=g)
    g.manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    y = (x @ teacher + 0.5 * torch.randn(n, CLASSES, generator=g)).argmax(dim=1)
    return x, y


def mlp(width: int) -> nn.Module:
    """``64 -> width -> width -> 10`` with GELUs."""
    return nn.Sequential(
        nn.Linear(IN, width), nn.GELU(), nn.Linear(width, width), nn.GELU(),
        nn.Linear(width, CLASSES),
    )  # fmt: skip


def train_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch[0]), batch[1])


def held_out_loss(model: nn.Module, state: dict[str, torch.Tensor], n: int) -> float:
    """Cross-entropy of ``model`` loaded with ``state`` on ``n`` samples of a seed (99) the
    training sets never use."""
    model.load_state_dict(state)
    x, y = make_data(n, seed=99)
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(x), y))


def train_alone(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                epochs: int, batch: int) -> tuple[int, float]:  # fmt: skip
    """The fast rank alone, in this process on one thread: ``epochs`` seeded passes over
    ``x`` ``(n, 64)`` / ``y`` ``(n,)`` in full batches. Returns (samples trained, seconds)."""
    torch.set_num_threads(1)
    n = x.shape[0] // batch * batch
    t = time.perf_counter()
    for epoch in range(epochs):
        g = torch.Generator().manual_seed(42 + epoch)
        order = torch.randperm(x.shape[0], generator=g)[:n]
        for i in range(0, n, batch):
            idx = order[i : i + batch]
            loss = train_step(model, (x[idx], y[idx]))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return epochs * n, time.perf_counter() - t
