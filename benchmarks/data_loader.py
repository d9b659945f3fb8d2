"""One epoch over a 60k x 784 float dataset, batch 64: flodl's DataLoader vs torch's.

Contenders, timed in interleaved rounds (each round runs every contender once, in a rotating
order, so drift in machine load hits them all alike); the reported figure is the median epoch:

- flodl resident (the default on CPU for in-memory tensors)
- flodl streaming (background thread, auto prefetch)
- torch DataLoader with default settings (num_workers=0) over a TensorDataset, shuffled
- torch DataLoader with worker processes (persistent), each ``num_workers`` tried; best kept
- a hand-written loop (``x[perm[i:i+64]]``), the floor any loader can reach
- the same rows as a per-item map-style dataset (``ds[i]`` per sample): flodl streaming (its
  default for one), flodl resident (``streaming=False``) and torch's default loader, alone and
  feeding an MLP training step (784-256-10, SGD), where the streaming thread's reads overlap
  the step's compute

Usage: ``python benchmarks/data_loader.py [--rounds 5] [--samples 60000] [--workers 1,2]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset, TensorDataset

from flodl_core import DataLoader


def consume(batches: Iterable[object]) -> int:
    n = 0
    for _ in batches:
        n += 1
    return n


class Items(Dataset):
    """The tensors as a map-style dataset: one ``(x[i], y[i])`` sample per ``ds[i]``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def _parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--samples", type=int, default=60_000)
    p.add_argument("--features", type=int, default=784)
    p.add_argument("--batch", type=int, default=64)
    cpus = os.cpu_count() or 1
    p.add_argument("--workers", default=",".join(str(i) for i in range(1, cpus + 1)))
    return p.parse_args()


def median_epochs(contenders: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Median seconds per contender over ``rounds`` interleaved rounds, after one warm-up each.

    Each round runs every contender once in a rotating order, so drift in machine load hits
    them all alike.
    """
    for fn in contenders.values():  # warm-up: worker start-up, allocator, first-touch
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            t0 = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def _report(args: argparse.Namespace, med: dict[str, float]) -> None:
    """The side-by-side table, relative to flodl resident, and the summary sentence."""
    ref = med["flodl resident"]
    names = list(med)
    worker_names = [n for n in names if n.startswith("torch num_workers")]
    best_workers = min(worker_names, key=med.__getitem__) if worker_names else None
    print(
        f"one epoch, {args.samples} x {args.features} float32, batch {args.batch}, "
        f"{args.rounds} interleaved rounds, median; torch {torch.__version__}, "
        f"{os.cpu_count() or 1} CPUs, {torch.get_num_threads()} intra-op threads"
    )
    print(f"{'loader':38s} {'epoch ms':>10s} {'vs flodl resident':>18s}")
    for name in names:
        mark = "  <- best torch workers" if name == best_workers else ""
        print(f"{name:38s} {med[name] * 1e3:10.1f} {med[name] / ref:17.1f}x{mark}")
    print(
        f"\nflodl resident is {med['torch default (num_workers=0)'] / ref:.1f}x faster than "
        "torch's default loader",
        end="",
    )
    if best_workers:
        print(f" and {med[best_workers] / ref:.1f}x faster than its best worker setting", end="")
    print(".")
    torch_items, stream_items = med["per-item: torch default"], med["per-item: flodl streaming"]
    speed = torch_items / stream_items
    step = "per-item + MLP step: "
    trained = med[step + "torch default"] / med[step + "flodl streaming"]
    print(
        f"per-item dataset: flodl streaming runs at {speed:.2f}x torch's speed alone, "
        f"{trained:.2f}x feeding a training step."
    )


def main() -> None:
    args = _parse_args()
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.samples, args.features, generator=g)
    y = torch.randint(0, 10, (args.samples,), generator=g)
    b = args.batch

    resident = DataLoader((x, y), batch_size=b)
    streaming = DataLoader((x, y), batch_size=b, streaming=True)
    assert resident.is_resident and not streaming.is_resident
    torch_default = TorchLoader(TensorDataset(x, y), batch_size=b, shuffle=True)
    torch_workers = {
        n: TorchLoader(
            TensorDataset(x, y), batch_size=b, shuffle=True, num_workers=n, persistent_workers=True
        )
        for n in (int(w) for w in args.workers.split(",") if w.strip())
    }

    def hand_written() -> int:
        perm = torch.randperm(args.samples)
        n = 0
        for i in range(0, args.samples - b + 1, b):
            idx = perm[i : i + b]
            _ = (x[idx], y[idx])
            n += 1
        return n

    items = Items(x, y)
    items_streamed = DataLoader(items, batch_size=b)
    items_resident = DataLoader(items, batch_size=b, streaming=False)
    assert items_resident.is_resident and not items_streamed.is_resident
    torch_items = TorchLoader(items, batch_size=b, shuffle=True)
    epoch = {"flodl": 0, "stream": 0, "items": 0}

    def per_item(loader: DataLoader) -> int:
        epoch["items"] += 1
        return consume(loader.epoch(epoch["items"]))

    mlp = torch.nn.Sequential(
        torch.nn.Linear(args.features, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    sgd = torch.optim.SGD(mlp.parameters(), lr=0.01)

    def train(batches: Iterable[Any]) -> int:
        n = 0
        for bx, by in batches:
            loss = torch.nn.functional.cross_entropy(mlp(bx), by)
            sgd.zero_grad()
            loss.backward()
            sgd.step()
            n += 1
        return n

    def flodl_resident() -> int:
        epoch["flodl"] += 1
        return consume(resident.epoch(epoch["flodl"]))

    def flodl_streaming() -> int:
        epoch["stream"] += 1
        return consume(streaming.epoch(epoch["stream"]))

    contenders: dict[str, Callable[[], int]] = {
        "flodl resident": flodl_resident,
        "flodl streaming": flodl_streaming,
        "torch default (num_workers=0)": lambda: consume(torch_default),
        **{
            f"torch num_workers={n} (persistent)": (lambda ld=ld: consume(ld))
            for n, ld in torch_workers.items()
        },
        "hand-written x[perm[i:i+64]]": hand_written,
        "per-item: flodl streaming": lambda: per_item(items_streamed),
        "per-item: flodl resident (streaming=False)": lambda: per_item(items_resident),
        "per-item: torch default": lambda: consume(torch_items),
        "per-item + MLP step: flodl streaming": lambda: train(items_streamed.epoch(0)),
        "per-item + MLP step: torch default": lambda: train(torch_items),
    }
    _report(args, median_epochs(contenders, args.rounds))


if __name__ == "__main__":
    main()
