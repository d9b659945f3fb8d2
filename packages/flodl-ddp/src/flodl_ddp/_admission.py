"""Admission: every rank proves it holds the run's token before any weight or gradient moves.

``fdl @cluster`` hands a fresh token for each run to every worker on its standard input (never
on a command line); the ranks find it in ``FLODL_CLUSTER_TOKEN``. Before training, through the
rendezvous store:

1. rank 0 puts a random ``nonce``;
2. every other rank ``r`` puts its own random ``salt_r`` and
   ``proof_r = HMAC-SHA256(token, "worker|nonce|r|world|salt_r")``;
3. rank 0 checks each proof (constant-time) and answers ``ok`` plus its own proof
   ``HMAC-SHA256(token, "controller|nonce|r|world|salt_r")`` (so a worker also knows it joined
   the right run), or ``refused``;
4. a refused rank raises; rank 0 raises when it refused anyone, so no training starts.

The token never appears in a message, a log line or the store: only nonces and HMACs do.
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


def new_token() -> str:
    """A fresh per-run token: 32 random bytes as 64 hex digits."""
    return secrets.token_hex(32)


def _mac(token: str, role: str, nonce: str, rank: int, world: int, salt: str) -> str:
    msg = f"{role}|{nonce}|{rank}|{world}|{salt}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def _get(store: Any, key: str, timeout_s: float, rank: int, host: str, waiting_for: str) -> str:
    try:
        store.wait([key], timedelta(seconds=timeout_s))
        return bytes(store.get(key)).decode()
    except DdpError:
        raise
    except Exception as e:
        raise DdpError(
            f"admission: timed out after {timeout_s:g} s waiting for {waiting_for} "
            f"({type(e).__name__}); is every worker of the cluster started?",
            rank=rank,
            host=host,
        ) from None


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
    """Run the admission handshake (module docstring) over ``store`` for ``rank``.

    Raises :class:`DdpError` on a rank whose token does not match (worker side), on rank 0 when
    it refused anyone, or when a peer does not answer within ``timeout_s``.
    """
    if world_size <= 1:
        return
    rid = next(_RUNS) if round_id is None else round_id
    base = f"{PREFIX}/{rid}"
    if rank == 0:
        nonce = secrets.token_hex(16)
        store.set(f"{base}/nonce", nonce.encode())
        refused: list[str] = []
        for r in range(1, world_size):
            answer = _get(store, f"{base}/proof/{r}", timeout_s, rank, host, f"rank {r}'s proof")
            salt, _, proof = answer.partition("|")
            peer_host, _, proof = proof.partition("|")
            if hmac.compare_digest(_mac(token, "worker", nonce, r, world_size, salt), proof):
                mine = _mac(token, "controller", nonce, r, world_size, salt)
                store.set(f"{base}/verdict/{r}", f"ok|{mine}".encode())
            else:
                store.set(f"{base}/verdict/{r}", b"refused|")
                refused.append(f"rank {r} on host {peer_host or '?'}")
        if refused:
            raise DdpError(
                f"admission refused {', '.join(refused)}: the proof does not match this run's "
                f"token, so no training started. Every worker must get the run's token in "
                f"{TOKEN_ENV} (fdl @cluster hands it to the workers it starts)",
                rank=0,
                host=host,
            )
        return
    nonce = _get(store, f"{base}/nonce", timeout_s, rank, host, "rank 0's nonce")
    salt = secrets.token_hex(16)
    proof = _mac(token, "worker", nonce, rank, world_size, salt)
    store.set(f"{base}/proof/{rank}", f"{salt}|{host}|{proof}".encode())
    verdict = _get(store, f"{base}/verdict/{rank}", timeout_s, rank, host, "rank 0's verdict")
    status, _, theirs = verdict.partition("|")
    if status != "ok":
        raise DdpError(
            f"admission refused by rank 0: this worker's {TOKEN_ENV} does not match the run's "
            "token. Start the workers through fdl @cluster, which hands each one the run's token",
            rank=rank,
            host=host,
        )
    if not hmac.compare_digest(theirs, _mac(token, "controller", nonce, rank, world_size, salt)):
        raise DdpError(
            "admission: rank 0 could not prove it holds this run's token; refusing to train "
            "with it (is another run using the same rendezvous port?)",
            rank=rank,
            host=host,
        )


def admit_rank(ctx: Any, timeout_s: float) -> None:
    """The hook of a managed rank: run :func:`admit` over the rank's store when a token is set.

    ``ctx`` is the rank's ``RankContext``; its exchange store is shared by all ranks of the run.
    """
    token = token_from_env()
    if token is None or ctx.world_size <= 1:
        return
    admit(ctx.comm.store, ctx.rank, ctx.world_size, token, host=ctx.host, timeout_s=timeout_s)
