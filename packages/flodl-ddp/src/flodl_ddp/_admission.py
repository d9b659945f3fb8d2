"""Admission: every rank proves it holds the run's token before any weight or gradient moves.

``fdl @cluster`` hands each run's fresh token to the workers on stdin; ranks read it from
``FLODL_CLUSTER_TOKEN``. Over the rendezvous store: rank 0 puts a random ``nonce``; each other rank
``r`` puts a random ``salt_r`` and ``HMAC-SHA256(token, "worker|nonce|r|world|salt_r")``; rank 0
checks each (constant-time) and answers ``ok`` plus its own proof (``"controller|..."``, so a worker
knows it joined the right run) or ``refused``. A refused rank raises, and so does rank 0 when it
refused anyone: no training starts. Only nonces and HMACs travel, never the token.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import os
import secrets
from datetime import timedelta
from typing import Any

from ._errors import DdpError

TOKEN_ENV = "FLODL_CLUSTER_TOKEN"
PREFIX = "flodl-admission"
_RUNS = itertools.count()


def token_from_env() -> str | None:
    """The run token, or None when this run was not started with one."""
    return os.environ.get(TOKEN_ENV) or None


def _mac(token: str, role: str, nonce: str, rank: int, world: int, salt: str) -> str:
    msg = f"{role}|{nonce}|{rank}|{world}|{salt}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def _get(store: Any, key: str, timeout_s: float, rank: int, host: str, waiting_for: str) -> str:
    try:
        store.wait([key], timedelta(seconds=timeout_s))
        return bytes(store.get(key)).decode()
    except Exception as e:
        why = (
            f"admission: timed out after {timeout_s:g} s waiting for {waiting_for} "
            f"({type(e).__name__}); is every worker of the cluster started?"
        )
        raise DdpError(why, rank=rank, host=host) from None


def admit(
    store: Any,
    rank: int,
    world_size: int,
    token: str,
    *,
    host: str = "",
    timeout_s: float = 60.0,
    round_id: int | None = None,
) -> None:
    """Run the admission handshake (module docstring) over ``store`` for ``rank``: a
    :class:`DdpError` on a rank whose token does not match (worker side), on rank 0 when it
    refused anyone, or when a peer does not answer within ``timeout_s``."""
    if world_size <= 1:
        return
    base = f"{PREFIX}/{next(_RUNS) if round_id is None else round_id}"
    if rank == 0:
        _verify(store, base, world_size, token, host, timeout_s)
    else:
        _prove(store, base, rank, world_size, token, host, timeout_s)


def _verify(store: Any, base: str, world: int, token: str, host: str, timeout_s: float) -> None:
    nonce = secrets.token_hex(16)
    store.set(f"{base}/nonce", nonce.encode())
    refused: list[str] = []
    for r in range(1, world):
        answer = _get(store, f"{base}/proof/{r}", timeout_s, 0, host, f"rank {r}'s proof")
        salt, _, proof = answer.partition("|")
        peer_host, _, proof = proof.partition("|")
        if hmac.compare_digest(_mac(token, "worker", nonce, r, world, salt), proof):
            mine = _mac(token, "controller", nonce, r, world, salt)
            store.set(f"{base}/verdict/{r}", f"ok|{mine}".encode())
        else:
            store.set(f"{base}/verdict/{r}", b"refused|")
            refused.append(f"rank {r} on host {peer_host or '?'}")
    if refused:
        why = (
            f"admission refused {', '.join(refused)}: the proof does not match this run's "
            f"token, so no training started. Every worker must get the run's token in "
            f"{TOKEN_ENV} (fdl @cluster hands it to the workers it starts)"
        )
        raise DdpError(why, rank=0, host=host)


def _prove(store: Any, base: str, rank: int, world: int, token: str, host: str, t: float) -> None:
    """A worker's side: prove the token, check rank 0's proof in its verdict (``t``: timeout)."""
    nonce = _get(store, f"{base}/nonce", t, rank, host, "rank 0's nonce")
    salt = secrets.token_hex(16)
    proof = _mac(token, "worker", nonce, rank, world, salt)
    store.set(f"{base}/proof/{rank}", f"{salt}|{host}|{proof}".encode())
    verdict = _get(store, f"{base}/verdict/{rank}", t, rank, host, "rank 0's verdict")
    status, _, theirs = verdict.partition("|")
    if status != "ok":
        why = (
            f"admission refused by rank 0: this worker's {TOKEN_ENV} does not match the run's "
            "token. Start the workers through fdl @cluster, which hands each one the run's token"
        )
    elif not hmac.compare_digest(theirs, _mac(token, "controller", nonce, rank, world, salt)):
        why = (
            "admission: rank 0 could not prove it holds this run's token; refusing to train "
            "with it (is another run using the same rendezvous port?)"
        )
    else:
        return
    raise DdpError(why, rank=rank, host=host)


def admit_rank(ctx: Any, timeout_s: float) -> None:
    """The hook of a managed rank: run :func:`admit` over the store of ``ctx`` (the rank's
    ``RankContext``, whose exchange store all ranks share) when a token is set."""
    token = token_from_env()
    if token is None or ctx.world_size <= 1:
        return
    admit(ctx.comm.store, ctx.rank, ctx.world_size, token, host=ctx.host, timeout_s=timeout_s)
