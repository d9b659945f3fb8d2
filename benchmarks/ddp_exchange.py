"""How long a rank spends in one exchange of a few numbers: the store against shared memory.

Two spawned ranks (one torch thread each, bound to their own core where the host has two or
more) repeat what an averaging round does: compute, exchange, compute a little, exchange again.
Rank 1 computes ``--lag`` ms longer before the first exchange, so rank 0 waits there (a round's
arrival); the second exchange is reached together (the timings that follow the averaging).
Both ranks run the same loop twice over one ``flodl_ddp._comm.Comm``: first through the store
(the launching process hosts the ``TCPStore``, as a run does), then through the shared-memory
mailbox (``Comm.share_counters()``).

Columns: the median time in the exchange per rank, for the waiting exchange (less the ``lag``
the wait itself takes, on rank 0) and the together one, and the store / shared-memory ratio.

Usage: ``python benchmarks/ddp_exchange.py [--rounds 400] [--compute 0.5] [--lag 0.3]``.
Timings move when other processes share the cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2


def busy(ms: float) -> None:
    """Keep this core busy for ``ms`` milliseconds (a stand-in for a batch)."""
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


def rank_main(rank: int, port: int, args: Any, queue: Any) -> None:
    from flodl_ddp._comm import Comm

    torch.set_num_threads(1)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) >= WORLD:
        os.sched_setaffinity(0, {cores[rank]})
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=60))
    comm = Comm(dist.PrefixStore("bench", store), rank, WORLD)
    out: dict[str, list[float]] = {}
    for path in ("store", "shared memory"):
        if path == "shared memory" and not comm.share_counters():
            break
        comm.barrier("go")
        waiting, together = [], []
        for _ in range(args.rounds):
            busy(args.compute + (args.lag if rank == 1 else 0.0))
            t = time.perf_counter()
            comm.exchange("n", [1.0, 0.0, 1.0])
            waiting.append(time.perf_counter() - t)
            busy(args.compute / 2)
            t = time.perf_counter()
            comm.exchange("s", [1.0, 2.0, 3.0, 4.0])
            together.append(time.perf_counter() - t)
        skip = args.rounds // 10  # the first rounds warm up
        out[path] = [statistics.median(waiting[skip:]), statistics.median(together[skip:])]
    comm.barrier("done")
    comm.close()
    queue.put((rank, out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=400)
    p.add_argument("--compute", type=float, default=0.5, help="ms of work before an exchange")
    p.add_argument("--lag", type=float, default=0.3, help="rank 1's extra ms before the first")
    args = p.parse_args()
    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timeout=timedelta(seconds=60), wait_for_workers=False
    )
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, store.port, args, queue)) for r in range(2)]
    for proc in procs:
        proc.start()
    try:
        results = dict(queue.get(timeout=300) for _ in procs)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    print(
        f"flodl ddp_exchange: {args.rounds} rounds, {args.compute} ms compute, "
        f"rank 1 {args.lag} ms later"
    )
    print(f"{'rank / exchange':<22}{'store (ms)':>12}{'shared memory (ms)':>20}{'ratio':>8}")
    for rank in range(WORLD):
        res = results[rank]
        for i, what in enumerate(("waiting", "together")):
            lag = args.lag if (rank == 0 and i == 0) else 0.0
            st = 1000 * res["store"][i] - lag
            if "shared memory" not in res:
                print(f"rank {rank} {what:<15}{st:>12.3f}{'(not shared)':>20}")
                continue
            sh = 1000 * res["shared memory"][i] - lag
            ratio = st / sh if sh > 0 else float("inf")
            print(f"rank {rank} {what:<15}{st:>12.3f}{sh:>20.3f}{ratio:>7.1f}x")


if __name__ == "__main__":
    main()
