"""The classification task the distributed benchmarks train (`ddp_hetero.py`, `ddp_comm.py`,
`ddp_sync_step.py`), and the plain torch DDP they compare against.

Spawned ranks import the benchmark script, which imports this module from the same folder, so
the factories they receive build the same model on every rank.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
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


# ---- plain torch DDP on two spawned ranks ------------------------------------------------------


def spawn_pair(rank_fn: Callable[..., None], *args: Any) -> Any:
    """Run ``rank_fn(rank, port, *args, out)`` on two spawned ranks; returns the JSON rank 0
    wrote to ``out`` (the parent hosts the store on a free port)."""
    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timeout=timedelta(seconds=120), wait_for_workers=False
    )
    with tempfile.TemporaryDirectory() as d:
        out = str(Path(d) / "result.json")
        ctx = mp.start_processes(
            rank_fn, args=(store.port, *args, out), nprocs=2, join=False, start_method="spawn"
        )
        while not ctx.join(timeout=600):
            pass
        return json.loads(Path(out).read_text())


def join_pair(rank: int, port: int) -> None:
    """This spawned rank joins the pair's gloo group on one torch thread."""
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)


def ddp_epoch(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
              rank: int, batch: int, epoch: int, slow: Any) -> int:  # fmt: skip
    """One epoch of plain torch DDP as a PyTorch user writes it: rank ``rank``'s half of the
    epoch's seeded permutation in full batches, index slicing, ``slow.after_batch`` (flodl's
    slowdown hook) after each step. Returns the steps taken."""
    per = x.shape[0] // 2 // batch * batch
    g = torch.Generator().manual_seed(42 + epoch)
    order = torch.randperm(x.shape[0], generator=g)[rank * per : (rank + 1) * per]
    for i in range(0, per, batch):
        t = time.perf_counter()
        idx = order[i : i + batch]
        loss = train_step(model, (x[idx], y[idx]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        slow.after_batch(t)
    return per // batch
