"""Same-host counters in shared memory (:mod:`flodl_ddp._shm_counters`)."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import flodl_ddp._shm as shm
from flodl_ddp import DdpError
from flodl_ddp._comm import Comm
from flodl_ddp._shm_counters import CAPACITY, SharedCounters

sys.path.insert(0, str(Path(__file__).parent))
from rank_harness import spawn_ranks, thread_ranks


def test_counters_are_shared_named_and_dropped() -> None:
    """Each rank's adds are seen by the others; names are independent; a dropped counter starts
    again from 0; the store holds none of it."""

    def body(comm: Comm) -> list[Any]:
        assert comm.share_counters()
        assert comm.counters_shared
        comm.barrier("a")
        mine = comm.counter("rdy1", 1)
        comm.counter("pool1", 10 * (comm.rank + 1))
        comm.barrier("b")
        seen = [comm.counter("rdy1", 0), comm.counter("pool1", 0), comm.counter("stp1", 0)]
        comm.barrier("c")
        if comm.rank == 0:
            comm.drop_counter("rdy1")
            comm.drop_counter("never-made")  # absent is fine
        comm.barrier("d")
        after = comm.counter("rdy1", 0)
        live = comm._counters.live()
        comm.barrier("e")
        return [mine, seen, after, live, comm.store.check(["rdy1"])]

    a, b, c = thread_ranks(3, body)
    assert sorted([a[0], b[0], c[0]]) == [1, 2, 3]  # three adds, three distinct results
    assert a[1] == b[1] == c[1] == [3, 60, 0]
    assert a[2] == b[2] == c[2] == 0
    assert a[3] == 1  # pool1 only: reading an absent counter (stp1, dropped rdy1) takes no entry
    assert not a[4]  # nothing went through the store


def test_one_rank_that_cannot_map_the_file_keeps_every_rank_on_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another host: rank 0's file is not there; every rank counts through the store, same
    answers."""
    monkeypatch.setattr(shm, "_attach", lambda path, size, nonce: None)

    def body(comm: Comm) -> list[Any]:
        shared = comm.share_counters()
        comm.barrier("a")
        comm.counter("k", comm.rank + 1)
        comm.barrier("b")
        return [shared, comm.counter("k", 0), comm.store.check(["k"])]

    assert thread_ranks(2, body) == [[False, 3, True], [False, 3, True]]


def test_a_full_table_names_the_counter() -> None:
    def body(comm: Comm) -> str:
        comm.share_counters()
        if comm.rank == 1:
            for i in range(CAPACITY):
                comm.counter(f"c{i}", 1)
            with pytest.raises(DdpError, match=r"all 256 entries are in use \(adding 'one-more'\)"):
                comm.counter("one-more", 1)
            comm.drop_counter("c7")
            assert comm.counter("one-more", 5) == 5  # a dropped entry is free again
        comm.barrier("done")
        return "ok"

    assert thread_ranks(2, body) == ["ok", "ok"]


def test_close_releases_the_mapping_and_descriptor() -> None:
    def body(comm: Comm) -> tuple[int, int]:
        before = len(os.listdir("/proc/self/fd"))
        counters = SharedCounters.open(comm)
        assert counters is not None
        counters.add("k", 1)
        comm.barrier("used")
        counters.close()
        comm.barrier("closed")
        return before, len(os.listdir("/proc/self/fd"))

    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc to count descriptors")
    (b0, a0), (b1, a1) = thread_ranks(2, body)
    assert a1 <= b1 + 1 and a0 <= b0 + 1  # threads share the table of descriptors: <= the other's


@pytest.mark.multiprocess
def test_adds_from_racing_processes_are_atomic(tmp_path: Path) -> None:
    """Two processes add 1 two thousand times each, at once: every value 1..4000 is returned
    exactly once (a lost update would repeat one and the total would fall short)."""
    import ddp_trainer_fixtures as fx

    n = 2000
    res = spawn_ranks(fx.counters_worker, 2, (n,), tmp_path, timeout_s=60.0)
    assert [r["shared"] for r in res] == [True, True]
    got = res[0]["got"] + res[1]["got"]
    assert sorted(got) == list(range(1, 2 * n + 1))
    assert res[0]["final"] == res[1]["final"] == 2 * n
    assert [p for p in multiprocessing.active_children() if p.is_alive()] == []
