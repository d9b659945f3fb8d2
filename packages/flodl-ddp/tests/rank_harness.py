"""Ranks for tests: threads over one in-memory store, or spawned processes over a TCP store.

Test modules put this folder on ``sys.path`` and import it by name (spawned children import the
rank bodies the same way).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from flodl_core import atomic_write
from flodl_ddp._comm import StoreComm as Comm


def thread_ranks(world: int, body: Callable[[Comm], Any]) -> list[Any]:
    """``body(comm)`` on ``world`` threads that share one store; their results in rank order."""
    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=20))
    out: list[Any] = [None] * world
    errors: list[BaseException] = []

    def run(r: int) -> None:
        try:
            out[r] = body(Comm(store, r, world))
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]
    return out


def write_result(out_dir: str | Path, rank: int, result: dict[str, Any]) -> None:
    """A rank's results as ``out_dir/rank<r>.json``, atomically: the file :func:`spawn_ranks`
    reads once the rank has exited."""
    atomic_write(Path(out_dir) / f"rank{rank}.json", json.dumps(result))


def spawn_ranks(
    fn: Any, world: int, args: tuple[Any, ...], out: Path, timeout_s: float
) -> list[dict[str, Any]]:
    """Run ``fn(rank, port, world, out, *args)`` on ``world`` spawned ranks; each rank's JSON
    (``out/rank<r>.json``, written by the rank).

    The parent hosts the store on a free port and kills any rank still alive when it returns
    or fails; a SIGABRT at process-group teardown is tolerated when every rank wrote its results
    first.
    """
    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timeout=timedelta(seconds=60), wait_for_workers=False
    )
    ctx = mp.start_processes(
        fn, args=(store.port, world, str(out), *args), nprocs=world, join=False,
        start_method="spawn",
    )  # fmt: skip
    files = [out / f"rank{r}.json" for r in range(world)]
    try:
        deadline = time.monotonic() + timeout_s
        while not ctx.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                pytest.fail(f"ranks still running after {timeout_s:.0f} s")
    except mp.ProcessExitedException as e:
        if not (e.signal_name == signal.Signals.SIGABRT.name and all(f.exists() for f in files)):
            raise
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()
    results = [json.loads(f.read_text()) for f in files]
    for r, res in enumerate(results):
        assert "error" not in res, f"rank {r} failed:\n{res['error']}"
    return results
