"""Same-host exchanges in shared memory (:mod:`flodl_ddp._shm_exchange`)."""

from __future__ import annotations

import multiprocessing
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import flodl_ddp._shm as shm
from flodl_ddp import DdpError
from flodl_ddp._comm import Comm
from flodl_ddp._shm_exchange import ROW_BYTES

sys.path.insert(0, str(Path(__file__).parent))
from rank_harness import spawn_ranks, thread_ranks


def test_every_rank_gets_every_rank_values_in_rank_order_and_the_store_none() -> None:
    """Lengths may differ by rank; nothing goes through the store; the arrival counters are
    dropped as the exchanges go on."""

    def body(comm: Comm) -> list[Any]:
        assert comm.share_counters()
        seq_before = comm._seq
        got = [comm.exchange("n", [float(comm.rank)] * (comm.rank + 1)) for _ in range(5)]
        keys = [f"n{seq_before + k}/{r}" for k in range(1, 6) for r in range(3)]
        in_store = any(comm.store.check([k]) for k in keys)
        live = comm._counters.live()
        comm.barrier("done")
        return [got, in_store, live]

    res = thread_ranks(3, body)
    want = [[0.0], [1.0, 1.0], [2.0, 2.0, 2.0]]
    for got, in_store, live in res:
        assert got == [want] * 5
        assert not in_store
        assert live <= 2  # the last exchange's counter (and one the next exchange drops)


@pytest.mark.multiprocess
def test_racing_processes_never_read_a_stale_or_torn_row(tmp_path: Path) -> None:
    """Two processes make 3,000 exchanges at once, each sending numbers that name the exchange,
    with random pauses: every rank reads every exchange's own values (a row rewritten too early
    would show the next exchange's numbers, a stale one the previous')."""
    import ddp_trainer_fixtures as fx

    n = 3000
    res = spawn_ranks(fx.exchange_worker, 2, (n,), tmp_path, timeout_s=90.0)
    assert [r["shared"] for r in res] == [True, True]
    assert [r["wrong"] for r in res] == [[], []]
    assert [r["count"] for r in res] == [n, n]
    assert [p for p in multiprocessing.active_children() if p.is_alive()] == []


def test_a_message_longer_than_a_row_goes_through_the_store_and_is_cleaned_up() -> None:
    """Each rank decides for its own message; the others read it from the store; its key is
    gone once every rank has read it. Barriers (empty messages) ride the mailbox too."""

    def body(comm: Comm) -> list[Any]:
        assert comm.share_counters()
        long = bytes([comm.rank]) * (ROW_BYTES + 1) if comm.rank == 1 else b"short"
        got = comm.exchange_bytes("ep", long)
        key = f"mx{comm._seq}/1"
        there = comm.store.check([key])
        comm.barrier("read")
        comm.barrier("and once more")  # rank 1 deletes its key here: everyone read it
        gone = not comm.store.check([key])
        return [got, there, gone]

    want = [b"short", b"\x01" * (ROW_BYTES + 1)]
    assert thread_ranks(2, body) == [[want, True, True]] * 2


def test_a_rank_that_does_not_arrive_is_an_error_not_a_hang() -> None:
    """Rank 1 arrives only after rank 0 gave up: rank 0 fails after the timeout, naming the
    exchange; rank 1 then finds rank 0's row there and goes on."""
    gave_up = threading.Event()

    def body(comm: Comm) -> Any:
        comm.share_counters()
        comm._mailbox.timeout_s = 0.3
        out: Any = None
        if comm.rank == 0:
            t = time.monotonic()
            with pytest.raises(DdpError, match=r"exchange 's': waited 0.3 s .*\(1 of 2 arrived\)"):
                comm.exchange("s", [1.0])
            out = time.monotonic() - t
            gave_up.set()
        else:
            assert gave_up.wait(30.0)
            out = comm.exchange("s", [2.0])
        comm.barrier("done")
        return out

    waited, late = thread_ranks(2, body)
    assert 0.3 <= waited < 5.0
    assert late == [[1.0], [2.0]]


def test_without_shared_memory_exchanges_go_through_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(shm, "_attach", lambda path, size, nonce: None)

    def body(comm: Comm) -> list[Any]:
        assert not comm.share_counters()
        got = comm.exchange("n", [float(comm.rank)])
        key = f"n{comm._seq}/{comm.rank}"
        return [got, comm.store.check([key])]

    assert thread_ranks(2, body) == [[[[0.0], [1.0]], True]] * 2


def test_close_puts_exchanges_back_on_the_store() -> None:
    def body(comm: Comm) -> list[Any]:
        assert comm.share_counters()
        comm.barrier("opened")
        comm.close()
        got = comm.exchange("n", [float(comm.rank)])
        return [got, comm.store.check([f"n{comm._seq}/{comm.rank}"])]

    assert thread_ranks(2, body) == [[[[0.0], [1.0]], True]] * 2
