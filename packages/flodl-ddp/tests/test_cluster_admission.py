"""Admission: ranks prove the run token (HMAC over rank 0's nonce) before training starts."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flodl_ddp import DdpError, admit
from flodl_ddp._admission import TOKEN_ENV, admit_rank, token_from_env

WORKER = Path(__file__).with_name("cluster_admission_worker.py")


class MemoryStore:
    """The part of a c10d store admission uses (set / get / wait), in memory, thread-safe.
    ``log`` keeps every value written, to check that the token never goes through the store."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.log: list[bytes] = []
        self.cond = threading.Condition()

    def set(self, key: str, value: bytes) -> None:
        with self.cond:
            self.data[key] = value
            self.log.append(value)
            self.cond.notify_all()

    def wait(self, keys: list[str], timeout: timedelta) -> None:
        with self.cond:
            if not self.cond.wait_for(
                lambda: all(k in self.data for k in keys), timeout.total_seconds()
            ):
                raise TimeoutError(f"keys {keys}")

    def get(self, key: str) -> bytes:
        self.wait([key], timedelta(seconds=5))
        return self.data[key]


def _run(tokens: list[str], store: Any = None, timeout_s: float = 5.0) -> list[Any]:
    store = store or MemoryStore()
    results: list[Any] = [None] * len(tokens)

    def rank(r: int) -> None:
        try:
            admit(
                store, r, len(tokens), tokens[r], host=f"host{r}", timeout_s=timeout_s, round_id=0
            )
            results[r] = "ok"
        except DdpError as e:
            results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(tokens))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_same_token_admits_everyone_and_never_stores_the_token() -> None:
    token = secrets.token_hex(32)  # as `fdl @cluster` makes one
    store = MemoryStore()
    assert _run([token] * 3, store) == ["ok", "ok", "ok"]
    assert not any(token.encode() in v for v in store.log)
    nonce = store.data["flodl-admission/0/nonce"].decode()
    salt, host, proof = store.data["flodl-admission/0/proof/2"].decode().split("|")
    want = hmac.new(
        token.encode(), f"worker|{nonce}|2|3|{salt}".encode(), hashlib.sha256
    ).hexdigest()
    assert host == "host2" and proof == want  # HMAC-SHA256 over the nonce, rank, world, salt


def test_wrong_token_is_refused_on_both_sides() -> None:
    results = _run(["good", "good", "evil"])
    assert results[1] == "ok"
    worker, leader = results[2], results[0]
    assert isinstance(worker, DdpError) and worker.rank == 2 and worker.host == "host2"
    assert "admission refused by rank 0" in str(worker) and TOKEN_ENV in str(worker)
    assert isinstance(leader, DdpError) and leader.rank == 0
    assert "admission refused rank 2 on host host2" in str(leader)
    assert "no training started" in str(leader)
    assert "good" not in str(leader) + str(worker) and "evil" not in str(leader) + str(worker)


def test_a_rank_zero_without_the_token_is_not_trusted() -> None:
    store = MemoryStore()
    # A rank 0 that accepts anyone but cannot compute the controller's proof.
    store.set("flodl-admission/0/nonce", b"n")
    store.set("flodl-admission/0/verdict/1", b"ok|forged")
    with pytest.raises(DdpError, match="rank 0 could not prove"):
        admit(store, 1, 2, "good", host="h1", timeout_s=2, round_id=0)


def test_macs_are_compared_only_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every MAC check goes through ``hmac.compare_digest``, and its answer alone decides: with
    a compare that says "different", even matching tokens are refused. An ``==`` in its place
    (timing leak) would skip the spy and admit them."""
    from flodl_ddp import _admission

    calls: list[tuple[str, str]] = []

    class SpyHmac:
        new = staticmethod(hmac.new)

        @staticmethod
        def compare_digest(a: str, b: str) -> bool:
            calls.append((a, b))
            return verdict

    monkeypatch.setattr(_admission, "hmac", SpyHmac)
    verdict = True
    assert _run(["tok"] * 3) == ["ok", "ok", "ok"]
    assert len(calls) == 4  # rank 0 checks ranks 1 and 2; each of them checks rank 0
    assert all(len(a) == len(b) == 64 for a, b in calls)  # hex SHA-256 MACs on both sides
    calls.clear()
    verdict = False
    results = _run(["tok"] * 2)
    assert isinstance(results[0], DdpError) and "refused rank 1" in str(results[0])
    assert isinstance(results[1], DdpError) and len(calls) == 1


def test_a_missing_peer_times_out_with_a_clear_error() -> None:
    with pytest.raises(DdpError, match=r"timed out after 0\.3 s waiting for rank 1's proof"):
        admit(MemoryStore(), 0, 2, "t", host="h0", timeout_s=0.3, round_id=0)
    admit(MemoryStore(), 0, 1, "t")  # alone: nothing to prove


def test_the_rank_hook_runs_only_with_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    class Ctx:
        rank, world_size, host = 1, 2, "h"
        comm = type("C", (), {"store": MemoryStore()})()

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert token_from_env() is None
    admit_rank(Ctx(), 0.2)  # no token: returns at once, touches nothing
    assert Ctx.comm.store.log == []
    monkeypatch.setenv(TOKEN_ENV, "tok")
    with pytest.raises(DdpError, match="waiting for rank 0's nonce"):
        admit_rank(Ctx(), 0.2)


@pytest.mark.multiprocess
def test_three_gloo_ranks_one_with_a_wrong_token() -> None:
    """Ranks 0 and 1 hold the run token, rank 2 another one: rank 1 is admitted, rank 2 is
    refused with a message on both sides, and rank 0 refuses to start the run."""
    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1", 0, None, True, timeout=timedelta(seconds=30), wait_for_workers=False
    )
    token = secrets.token_hex(32)
    tokens = [token, token, secrets.token_hex(32)]
    env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}
    env["OMP_NUM_THREADS"] = "1"
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(r), "3", str(store.port), tokens[r]],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for r in range(3)
    ]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=60)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert procs[0].returncode == 3, outs
    assert "REFUSED [rank 0, host h0] admission refused rank 2 on host h2" in outs[0]
    assert "ADMITTED" in outs[1] and "GROUP GONE" in outs[1], outs  # admitted; no run started
    assert procs[2].returncode == 3, outs
    assert "REFUSED [rank 2, host h2] admission refused by rank 0" in outs[2]
    assert not any(t in "".join(outs) for t in tokens)
