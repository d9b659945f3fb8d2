"""flodl-monitor overhead: ``log()`` cost, training throughput, ``/node`` latency.

Run: ``.venv/bin/python benchmarks/monitor.py`` (about 30 s). Prints, side by side:

1. ``Monitor.log()`` per call (median of interleaved rounds) with no server, with the server and
   no client, and with 50 SSE clients connected (the clients live in another process, as browsers
   would, so their reading does not steal this process's interpreter). Goal: < 0.5 ms per call.
2. Training throughput of a small MLP (steps/s) with no monitor against a monitor that serves
   50 clients, logging every 20 steps (a stress cadence, far more often than per epoch) and once
   per round (an epoch-like cadence); goal: equal within noise.
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

import torch

from flodl_monitor import Monitor, RecordTree


def _sse_clients(url: str, n: int, ready: mp.Event, stop: mp.Event) -> None:  # type: ignore[valid-type]
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
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())


def _connect(url: str, n: int) -> tuple[mp.Process, mp.Event]:  # type: ignore[valid-type]
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    p = ctx.Process(target=_sse_clients, args=(url, n, ready, stop), daemon=True)
    p.start()
    if not ready.wait(30):
        raise RuntimeError("SSE clients did not connect")
    return p, stop


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
    proc, stop = _connect(url, clients)
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
        connected = served._hubs[0].client_count()  # still connected: none was dropped
    finally:
        stop.set()
        proc.join(10)
        for m in (plain, served0, served):
            m.close()
    print(f"\n1. Monitor.log() per call ({rounds} rounds x {calls} calls)")
    print(f"   ({connected} of {clients} SSE clients still connected at the end)")
    base = statistics.median(out["no server"])
    for name, xs in out.items():
        med = statistics.median(xs)
        print(f"   {name:<26} {med * 1e3:7.3f} ms   x{med / base:5.2f}")
    return {k: statistics.median(v) for k, v in out.items()}


def _train(steps: int, monitor: Monitor | None, every: int, start: int) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 64), torch.randn(256, 64)
    t0 = time.perf_counter()
    for s in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if monitor is not None and (s + 1) % every == 0:
            monitor.log(start + s // every, 0.01, {"loss": loss.item()})
    return steps / (time.perf_counter() - t0)


def bench_training(rounds: int, steps: int, clients: int) -> None:
    """Steps/s with no monitor, with a quiet monitor, and with one serving ``clients`` SSE
    clients, at two cadences: a stress cadence (a log every 20 steps, ~40 per second here) and
    an epoch-like one (one log per ``steps``-step round)."""
    torch.set_num_threads(1)
    cadences = (20, steps)
    quiet = Monitor(rounds * steps, stream=io.StringIO())
    m = Monitor(rounds * steps, stream=io.StringIO())
    url = m.serve(0)
    proc, stop = _connect(url, clients)
    plain: list[float] = []
    runs: dict[tuple[int, str], list[float]] = {(e, k): [] for e in cadences for k in "qs"}
    configs: list[tuple[int, str]] = [(steps, "-"), *runs]
    epoch = 0
    try:
        for r in range(rounds):
            # Interleaved, and rotated each round: the first run of a round measured ~10 %
            # slower whichever it was, so every configuration takes every position in turn.
            shift = r % len(configs)
            for every, key in configs[shift:] + configs[:shift]:
                if key == "-":
                    plain.append(_train(steps, None, every, 0))
                    continue
                runs[every, key].append(_train(steps, quiet if key == "q" else m, every, epoch))
                epoch += steps // every
    finally:
        stop.set()
        proc.join(10)
        m.close()
        quiet.close()
    a = statistics.median(plain)
    print(f"\n2. Training throughput, MLP 64-256-64, batch 256 ({rounds} rounds x {steps} steps)")
    print(f"   no monitor                       {a:8.1f} steps/s")
    for every in cadences:
        for key, name in (("q", f"log every {every} steps"), ("s", f"  + server, {clients} SSE")):
            b = statistics.median(runs[every, key])
            print(f"   {name:<32} {b:8.1f} steps/s   ratio {b / a:5.3f}")
    print(f"   (the {clients} clients run in a second process on the same machine)")


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
    bench_training(rounds=5 if q else 10, steps=100 if q else 300, clients=50)
    bench_node(requests=50 if q else 300)


if __name__ == "__main__":
    main()
