"""Same-host counters in shared memory (:mod:`flodl_ddp._shm_counters`)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import weakref
from pathlib import Path
from typing import Any

import pytest

import flodl_ddp._shm as shm
from flodl_ddp import DdpError
from flodl_ddp._comm import Comm
from flodl_ddp._shm import map_shared
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


def test_a_lock_held_too_long_is_an_error_not_a_hang() -> None:
    """A peer stopped inside an operation: the waiting rank fails after the timeout, naming the
    counter; once the lock is free again, counting resumes."""
    import fcntl
    import time

    def body(comm: Comm) -> Any:
        counters = SharedCounters.open(comm, timeout_s=0.3)
        assert counters is not None
        if comm.rank == 1:
            fcntl.flock(counters._fd, fcntl.LOCK_EX)  # as if stopped mid-operation
        comm.barrier("held")
        out: Any = None
        if comm.rank == 0:
            t = time.monotonic()
            with pytest.raises(DdpError, match=r"waited 0.3 s for the lock \(counter 'pool3'\)"):
                counters.add("pool3", 1)
            out = time.monotonic() - t
        comm.barrier("timed out")
        if comm.rank == 1:
            fcntl.flock(counters._fd, fcntl.LOCK_UN)
        comm.barrier("released")
        if comm.rank == 0:
            assert counters.add("pool3", 1) == 1
        counters.close()
        return out

    waited = thread_ranks(2, body)[0]
    assert 0.3 <= waited < 5.0


def _released(fd: int, inode: int) -> bool:
    """Whether descriptor ``fd`` no longer refers to the file ``inode`` (closed, or its number
    reused for another file)."""
    try:
        return os.fstat(fd).st_ino != inode
    except OSError:
        return True


def test_close_or_collection_releases_the_file_and_counters_go_back_to_the_store() -> None:
    def body(comm: Comm) -> list[Any]:
        assert comm.share_counters()
        fd = comm._counters._fd
        inode = os.fstat(fd).st_ino
        comm.barrier("opened")
        comm.close()
        closed = _released(fd, inode)
        comm.barrier("closed")
        back = [comm.counters_shared, comm.counter("k", 1), comm.store.check(["k"])]
        comm.barrier("counted again")
        shared = map_shared(comm, "orphan", SharedCounters.nbytes(), eligible=True)
        assert shared is not None
        orphan = SharedCounters(shared)  # never closed: released when collected
        fd, inode, mapping = shared.fd, os.fstat(shared.fd).st_ino, weakref.ref(shared.mm)
        del orphan, shared
        return [closed, back, _released(fd, inode), mapping() is None]

    a, b = thread_ranks(2, body)
    for r in (a, b):
        assert r[0] is True
        assert r[1][0] is False and r[1][2] is True  # counted in the store from then on
        assert r[2] is True and r[3] is True
    assert sorted([a[1][1], b[1][1]]) == [1, 2]


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
