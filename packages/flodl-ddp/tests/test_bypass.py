"""The bypass tier over a real two-process gloo group, against hand-computed values."""

from __future__ import annotations

import importlib
import json
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from flodl_ddp import DdpError, all_reduce_gradients, sync_params

WORLD = 2
TIMEOUT_S = 90.0


def _spawn_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Run ``ddp_bypass_worker.main`` on 2 spawned ranks; return each rank's JSON results.

    The parent owns the rendezvous store on a free port (port 0, so no clash between tests); a
    hard timeout kills the ranks; a SIGABRT at teardown is tolerated when both ranks wrote their
    results (it happens about once in 40 runs with gloo on these machines).
    """
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # children import the worker by name
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    worker = importlib.import_module("ddp_bypass_worker")
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        WORLD + 1,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=30),
    )
    ctx = mp.start_processes(
        worker.main,
        args=(store.port, WORLD, str(tmp_path)),
        nprocs=WORLD,
        join=False,
        start_method="spawn",
    )
    files = [tmp_path / f"rank{r}.json" for r in range(WORLD)]
    try:
        try:
            # join returns False as soon as one rank exits while another still runs
            deadline = time.monotonic() + TIMEOUT_S
            while not ctx.join(timeout=max(0.0, deadline - time.monotonic())):
                if time.monotonic() >= deadline:
                    pytest.fail(f"ranks still running after {TIMEOUT_S:.0f} s; killed")
        except mp.ProcessExitedException as e:
            aborted = e.signal_name == signal.Signals.SIGABRT.name
            if not (aborted and all(f.exists() for f in files)):
                raise
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
            p.join(5)
    results = [json.loads(f.read_text()) for f in files]
    for r, res in enumerate(results):
        assert "error" not in res, f"rank {r} raised:\n{res['error']}"
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    with pytest.MonkeyPatch.context() as mp_:
        return _spawn_ranks(tmp_path_factory.mktemp("bypass"), mp_)


pytestmark = pytest.mark.multiprocess


def test_bucketed_mean(results: list[dict[str, Any]]) -> None:
    for res in results:
        # (1+0 + 1+1)/2 = 1.5; (0 + 4)/2 = 2; (0 + 7)/2 = 3.5; arange·(1 + 2)/2 = 1.5·arange
        assert res["avg"] == [
            [1.5] * 3,
            [[2.0, 2.0], [2.0, 2.0]],
            [3.5],
            [0.0, 1.5, 3.0, 4.5, 6.0],
        ]
        # ints floor-divide: (3 + 4)//2 = 3, (0 + 10)//2 = 5
        assert res["avg_int"] == [3, 5]
        # prescale 0.5 then sum: 0.5·[1,2] + 0.5·[2,4] = [1.5, 3]
        assert res["sum_prescaled"] == [1.5, 3.0]
        assert res["max"] == [1.0, 5.0]
        assert res["broadcast_from_1"] == [[6.0, 6.0], [1.0, 1.0, 1.0]]


def test_bf16_wire(results: list[dict[str, Any]]) -> None:
    # mean of x and 2x = 1.5x, x = [1, 1/3, 1000]; bf16 keeps 8 mantissa bits: rel. err < 2^-7
    exact = [1.5, 0.5, 1500.0]
    for res in results:
        assert res["bf16_dtype"] == "torch.float32"
        for got, want in zip(res["bf16_avg"], exact, strict=True):
            assert abs(got - want) <= abs(want) * 2**-7
    assert results[0]["bf16_avg"] == results[1]["bf16_avg"]


def test_sync_params_and_buffers(results: list[dict[str, Any]]) -> None:
    r0, r1 = results
    assert r0["params_after_sync"] == r1["params_after_sync"]
    # rank 0's BatchNorm buffers win: running_mean 1.0, num_batches_tracked 0
    assert r1["buffers_after_sync"] == r0["buffers_after_sync"]
    assert r1["buffers_after_sync"][0] == [1.0, 1.0]
    assert r1["buffers_after_sync"][2] == 0
    # sync_buffers broadcasts rank 0's running_var (0 + 2), not the mean (2.5)
    assert r0["running_var_after_sync_buffers"] == r1["running_var_after_sync_buffers"] == [2, 2]


def test_mean_gradients(results: list[dict[str, Any]]) -> None:
    # rank 0 holds g, rank 1 holds g + 10 → mean g + 5
    for res in results:
        assert res["mean"]["weight"] == [[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]]
        assert res["mean"]["bias"] == [5.0, 6.0]
        assert res["mean"]["unused"] == [0.0] * 4  # None became zeros on both ranks


def test_weighted_gradients(results: list[dict[str, Any]]) -> None:
    for res in results:
        # counts 3 and 1: 3/4·g + 1/4·(g + 10) = g + 2.5
        assert res["weighted_3_1"]["weight"] == [[2.5, 3.5, 4.5], [5.5, 6.5, 7.5]]
        assert res["weighted_3_1"]["bias"] == [2.5, 3.5]
        # counts 0 and 2: rank 0 weighs 0, rank 1 weighs 1 → g + 10
        assert res["weighted_0_2"]["weight"] == [[10.0, 11.0, 12.0], [13.0, 14.0, 15.0]]
        assert res["weighted_0_2"]["bias"] == [10.0, 11.0]
        assert "sum to 0" in res["zero_total"]


def test_mismatched_replicas(results: list[dict[str, Any]]) -> None:
    for res in results:
        rank, msg = res["mismatch"]
        assert rank == 1
        assert "the replica on rank 1 differs from rank 0's in its architecture" in msg
        assert "2 vs 2 tensors, 12 vs 8 parameter elements" in msg  # Linear(3, 3) vs (3, 2)


def test_replicas_that_differ_in_values_are_named(results: list[dict[str, Any]]) -> None:
    """Same architecture, different values: each rank's own initial weights, then one float32
    ulp in one weight, then one integer buffer, each on rank 1 only; after sync_params the
    replicas agree."""
    for res in results:
        assert res["values_after_sync"] is None
        for key, tensor in [
            ("values_before_sync", "lin.weight"),
            ("one_ulp_on_rank_1", "lin.weight"),
            ("buffer_on_rank_1", "bn.num_batches_tracked"),
        ]:
            rank, msg = res[key]
            assert rank == 1, (key, msg)
            assert "the replica on rank 1 differs from rank 0's in its values" in msg, (key, msg)
            assert f"first in {tensor!r}" in msg and "sync_params(model)" in msg, (key, msg)


def test_without_process_group() -> None:
    if dist.is_initialized():
        pytest.skip("a process group is initialised in this process")
    with pytest.raises(DdpError, match="init_process_group"):
        all_reduce_gradients(nn.Linear(2, 2))
    with pytest.raises(DdpError, match="init_process_group"):
        sync_params(nn.Linear(2, 2))
