"""One epoch over a 60k x 784 float dataset, batch 64: flodl's DataLoader vs torch's.

Contenders, timed in interleaved rounds (each round runs every contender once, in a rotating
order, so drift in machine load hits them all alike); the reported figure is the median epoch:

- flodl resident (the default on CPU for in-memory tensors)
- flodl streaming (background thread, auto prefetch)
- torch DataLoader with default settings (num_workers=0) over a TensorDataset, shuffled
- torch DataLoader with worker processes (persistent), each ``num_workers`` tried; best kept
- a hand-written loop (``x[perm[i:i+64]]``), the floor any loader can reach

Usage: ``python benchmarks/data_loader.py [--rounds 5] [--samples 60000] [--workers 1,2]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable, Iterable

import torch
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import TensorDataset

from flodl_core import DataLoader


def consume(batches: Iterable[object]) -> int:
    n = 0
    for _ in batches:
        n += 1
    return n


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

    epoch = {"flodl": 0, "stream": 0}

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
    }
    _report(args, median_epochs(contenders, args.rounds))


if __name__ == "__main__":
    main()
