"""flodl-monitor overhead: ``log()`` cost, training throughput, ``/node`` latency.

Run: ``.venv/bin/python benchmarks/monitor.py`` (about 2 minutes). Prints, side by side:

1. ``Monitor.log()`` per call (median of interleaved rounds) with no server, with the server and
   no client, and with 50 SSE clients connected (the clients live in another process, as browsers
   would, so their reading does not steal this process's interpreter). Goal: < 0.5 ms per call.
2. Training throughput of a small MLP (steps/s) with no monitor, with a monitor logging 40 times a
   second and no server, and with the same monitor serving 50 SSE clients (the server runs in its
   own process); goal: with the server >= 0.98x of without it.
3. ``GET /node`` latency on a synthetic 300-rank tree (10 hosts x 30 ranks) for the root, a host
   and a rank, and ``RecordTree.publish`` cost per record.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import multiprocessing as mp
import statistics
import time
import urllib.request
from typing import Any

import torch

from flodl_monitor import Monitor, RecordTree


def _sse_clients(url: str, n: int, ready: mp.Event, stop: mp.Event, alive: Any) -> None:  # type: ignore[valid-type]
    import aiohttp

    async def one(session: aiohttp.ClientSession) -> None:
        async with session.get(url + "/events") as resp:
            async for _ in resp.content.iter_any():
                pass

    async def main() -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as s:
            tasks = [asyncio.ensure_future(one(s)) for _ in range(n)]
            await asyncio.sleep(1.0)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
            alive.value = sum(not t.done() for t in tasks)  # streams never dropped
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


class _Clients:
    """``n`` SSE clients of ``url`` in a second process, as browsers would be."""

    def __init__(self, url: str, n: int) -> None:
        ctx = mp.get_context("spawn")
        ready, self._stop, self._alive = ctx.Event(), ctx.Event(), ctx.Value("i", -1)
        self._proc = ctx.Process(
            target=_sse_clients, args=(url, n, ready, self._stop, self._alive), daemon=True
        )
        self._proc.start()
        if not ready.wait(30):
            raise RuntimeError("SSE clients did not connect")

    def close(self) -> int:
        """Disconnect; returns how many were still connected (none dropped for lagging)."""
        self._stop.set()
        self._proc.join(10)
        return int(self._alive.value)


def _log_cost(m: Monitor, calls: int, start: int) -> float:
    """Median seconds of one log() call. Calls are 2 ms apart, as epochs are far apart: the
    server gets to flush between them and clients keep up (back-to-back calls would measure
    how fast 50 clients are dropped for falling behind)."""
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        m.log(start + i, 0.01, {"loss": 1.0 / (i + 1), "acc": 0.5, "lr": 1e-3})
        times.append(time.perf_counter() - t0)
        time.sleep(0.002)
    return statistics.median(times)


def bench_log(rounds: int, calls: int, clients: int) -> dict[str, float]:
    total = rounds * calls
    plain = Monitor(total, stream=io.StringIO())
    served0 = Monitor(total, stream=io.StringIO())
    served0.serve(0)
    served = Monitor(total, stream=io.StringIO())
    url = served.serve(0)
    conns = _Clients(url, clients)
    connected = -1
    try:
        time.sleep(0.5)
        out: dict[str, list[float]] = {
            "no server": [],
            "server, 0 clients": [],
            f"server, {clients} SSE clients": [],
        }
        for r in range(rounds):  # interleaved so drift hits every variant alike
            out["no server"].append(_log_cost(plain, calls, r * calls))
            out["server, 0 clients"].append(_log_cost(served0, calls, r * calls))
            out[f"server, {clients} SSE clients"].append(_log_cost(served, calls, r * calls))
    finally:
        connected = conns.close()
        for m in (plain, served0, served):
            m.close()
    print(f"\n1. Monitor.log() per call ({rounds} rounds x {calls} calls)")
    print(f"   ({connected} of {clients} SSE clients still connected at the end)")
    base = statistics.median(out["no server"])
    for name, xs in out.items():
        med = statistics.median(xs)
        print(f"   {name:<26} {med * 1e3:7.3f} ms   x{med / base:5.2f}")
    return {k: statistics.median(v) for k, v in out.items()}


def _train(steps: int, monitor: Monitor | None, rate: float, start: int) -> tuple[float, int]:
    """Steps/s of ``steps`` training steps, logging ``rate`` times a second; and the logs made."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 64), torch.randn(256, 64)
    logs = 0
    t0 = time.perf_counter()
    next_log = t0 + 1.0 / rate
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if monitor is not None and time.perf_counter() >= next_log:
            monitor.log(start + logs, 0.01, {"loss": loss.item(), "lr": 1e-3})
            logs += 1
            next_log += 1.0 / rate
    return steps / (time.perf_counter() - t0), logs


def bench_training(rounds: int, steps: int, clients: int, rate: float = 40.0) -> None:
    """Steps/s with no monitor, with a monitor logging ``rate`` times a second and no server,
    and with the same cadence while serving ``clients`` SSE clients (interleaved rounds)."""
    torch.set_num_threads(1)
    quiet = Monitor(10**7, stream=io.StringIO())
    served = Monitor(10**7, stream=io.StringIO())
    url = served.serve(0)
    conns = _Clients(url, clients)
    time.sleep(1.0)  # let the clients settle
    names = ("no monitor", f"log {rate:g}/s, no server", f"log {rate:g}/s + server, {clients} SSE")
    runs: dict[str, list[float]] = {n: [] for n in names}
    logs: dict[str, int] = {n: 0 for n in names}
    secs: dict[str, float] = {n: 0.0 for n in names}
    done = {quiet: 0, served: 0}
    connected = -1
    try:
        for r in range(rounds):
            # Interleaved, and rotated each round so that every configuration takes every
            # position in turn (drift and warm-up hit them alike).
            order = names[r % 3 :] + names[: r % 3]
            for name in order:
                m = None if name == names[0] else quiet if name == names[1] else served
                t0 = time.perf_counter()
                sps, n = _train(steps, m, rate, done.get(m, 0) if m is not None else 0)
                secs[name] += time.perf_counter() - t0
                if m is not None:
                    done[m] += n
                runs[name].append(sps)
                logs[name] += n
    finally:
        connected = conns.close()
        served.close()
        quiet.close()
    base = statistics.median(runs[names[0]])
    print(f"\n2. Training throughput, MLP 64-256-64, batch 256 ({rounds} rounds x {steps} steps)")
    for name in names:
        b = statistics.median(runs[name])
        rate_s = f"{logs[name] / secs[name]:5.1f} logs/s" if logs[name] else " " * 12
        print(f"   {name:<34} {b:8.1f} steps/s  {rate_s}   x{b / base:5.3f}")
    with_server = statistics.median(runs[names[2]]) / statistics.median(runs[names[1]])
    print(f"   with server / without server: {with_server:.3f}  (goal >= 0.98)")
    print(f"   ({connected} of {clients} clients, in a second process, still connected at the end)")


def bench_node(requests: int) -> None:
    m = Monitor(1, stream=io.StringIO(), resources=False, record_path=None)
    tree: RecordTree = m.records
    t0 = time.perf_counter()
    n_pub = 0
    for step in range(20):
        for h in range(10):
            for r in range(30):
                tree.publish(
                    f"root/host-{h}/rank{h * 30 + r}",
                    {"loss": 1.0 / (step + 1), "throughput": 100.0},
                    step=step,
                )
                n_pub += 1
    pub = (time.perf_counter() - t0) / n_pub
    url = m.serve(0)
    print(
        f"\n3. Record tree, 300 ranks (10 hosts x 30), 20 steps; publish {pub * 1e6:.1f} us/record"
    )
    try:
        for label, path in (
            ("root (10 children)", "root"),
            ("host (30 children)", "root/host-3"),
            ("rank (leaf)", "root/host-3/rank95"),
        ):
            times = []
            for _ in range(requests):
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"{url}/node?path={path}") as r:
                    r.read()
                times.append(time.perf_counter() - t0)
            direct = []
            for _ in range(requests):
                t0 = time.perf_counter()
                tree.node(path)
                direct.append(time.perf_counter() - t0)
            print(
                f"   /node {label:<20} HTTP {statistics.median(times) * 1e3:6.2f} ms   "
                f"tree.node() {statistics.median(direct) * 1e6:7.1f} us"
            )
    finally:
        m.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds (smoke run)")
    args = ap.parse_args()
    q = args.quick
    bench_log(rounds=3 if q else 7, calls=50 if q else 150, clients=50)
    bench_training(rounds=3 if q else 12, steps=300 if q else 1500, clients=50)
    bench_node(requests=50 if q else 300)


if __name__ == "__main__":
    main()
