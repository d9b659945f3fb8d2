"""The classification task the distributed benchmarks train (`ddp_hetero.py`, `ddp_comm.py`,
`ddp_sync_step.py`), the plain torch DDP they compare against, and a probe of how much two busy
cores slow each other (:func:`contention_probe`).

Spawned ranks import the benchmark script, which imports this module from the same folder, so
the factories they receive build the same model on every rank.
"""

from __future__ import annotations

import json
import os
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


# ---- how much two busy cores slow each other ---------------------------------------------------


def _probe_rank(rank: int, width: int, batch: int, seconds: float,
                phases: list[tuple[tuple[int, ...], float]], cores: list[list[int]] | None,
                barrier: Any, results: Any) -> None:  # fmt: skip
    """One probe process: in each phase it takes part in (``phases[i][0]`` lists the ranks),
    train for ``seconds`` and report its samples per second of *busy* time (the steps alone,
    not the slowdown's pauses); rank 1 is slowed ``phases[i][1]`` times. Every process meets
    every other at a barrier before each phase, so "together" phases really overlap."""
    if cores is not None:
        os.sched_setaffinity(0, cores[rank])  # before torch's thread pools start
    torch.set_num_threads(1)
    from flodl_ddp.testing import Slowdown  # the hook flodl's slowed ranks use

    x, y = make_data(4096, seed=rank)
    torch.manual_seed(42)
    model = mlp(width)
    opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    n = x.shape[0] // batch

    def step(i: int) -> None:
        j = (i % n) * batch
        loss = train_step(model, (x[j : j + batch], y[j : j + batch]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(5):  # warm-up: first steps allocate
        step(i)
    for phase, (ranks, factor) in enumerate(phases):
        barrier.wait()
        if rank not in ranks:
            continue
        slow = Slowdown(factor if rank == 1 else 1.0, torch.device("cpu"))
        busy, steps, end = 0.0, 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            t = time.perf_counter()
            step(steps)
            busy += time.perf_counter() - t
            slow.after_batch(t)
            steps += 1
        results.put((phase, rank, steps * batch / busy))
    barrier.wait()


def contention_probe(width: int, batch: int, factors: list[float], seconds: float,
                     cores: list[list[int]] | None) -> dict[str, Any]:  # fmt: skip
    """Each of two one-thread processes (on ``cores[r]`` when given) trains the MLP alone, then
    both train side by side once per slow factor (rank 1 slowed that much). Returns samples per
    busy second: ``{"alone": [r0, r1], "together": {factor: [r0, r1]}}``.

    A slowed device would not take cycles from its neighbour, but two cores of one machine
    still share caches and memory bandwidth: "together" over "alone" says how much. Busy time
    counts the steps only, so a rank slowed F times (asleep most of the time) is compared on its
    working speed."""
    phases: list[tuple[tuple[int, ...], float]] = [((0,), 1.0), ((1,), 1.0)]
    phases += [((0, 1), f) for f in factors]
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(target=_probe_rank,
                    args=(r, width, batch, seconds, phases, cores, barrier, results))
        for r in range(2)
    ]  # fmt: skip
    for p in procs:
        p.start()
    got: dict[tuple[int, int], float] = {}
    try:
        budget = 120.0 + 2 * seconds * len(phases)
        deadline = time.monotonic() + budget
        want = 2 + 2 * len(factors)
        while len(got) < want:
            phase, rank, sps = results.get(timeout=max(1.0, deadline - time.monotonic()))
            got[(phase, rank)] = sps
        for p in procs:
            p.join(timeout=60)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    return {
        "alone": [got[(0, 0)], got[(1, 1)]],
        "together": {f: [got[(2 + i, 0)], got[(2 + i, 1)]] for i, f in enumerate(factors)},
    }
