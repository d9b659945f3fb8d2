"""Control messages between ranks through the process group's ``TCPStore``.

Small numbers (timings, batch counts, losses, ready flags) do not need a collective: a store
round trip costs ~0.15 ms on loopback where a gloo ``all_gather`` costs 2-6 ms. Every rank calls
the same exchanges in the same order, so a per-exchange sequence number names the keys; a rank
deletes its own key of exchange ``n - 2`` when it completes exchange ``n`` (by then every rank has
read it: a rank writes key ``n - 1`` only after reading all of ``n - 2``).

Counters (:meth:`Comm.counter`) and exchanges (:meth:`Comm.exchange_bytes` and what builds on
it; a message longer than a few KB still goes through the store) move to shared memory when
every rank runs on one host (:meth:`Comm.share_counters`, :mod:`flodl_ddp._shm_counters`,
:mod:`flodl_ddp._shm_exchange`): microseconds instead of a store round trip each.

:class:`SoloComm` is the world-size-1 stand-in: every exchange returns the rank's own values.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence
from typing import Any


class Comm:
    """Store-backed exchanges for rank ``rank`` of ``world_size`` (``store`` already prefixed)."""

    def __init__(self, store: Any, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self._seq = 0
        self._mine: list[str] = []
        self._counters: Any = None  # SharedCounters once share_counters() succeeds
        self._mailbox: Any = None  # SharedExchange, likewise

    @property
    def solo(self) -> bool:
        return self.world_size == 1

    def _next(self, tag: str) -> str:
        self._seq += 1
        return f"{tag}{self._seq}"

    def _forget_old(self, key: str) -> None:
        self._mine.append(key)
        while len(self._mine) > 2:
            old = self._mine.pop(0)
            # cleanup only: a store that cannot delete keeps a few bytes
            with contextlib.suppress(Exception):
                self.store.delete_key(old)

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        """Every rank's ``payload`` for this exchange, in rank order (blocks for all of them)."""
        base = self._next(tag)
        if self._mailbox is not None:
            return self._mailbox.exchange(self._seq, tag, payload)
        mine = f"{base}/{self.rank}"
        self.store.set(mine, payload)
        out = list(self.store.multi_get([f"{base}/{r}" for r in range(self.world_size)]))
        self._forget_old(mine)
        return out

    def gather_bytes(self, tag: str, payload: bytes) -> list[bytes] | None:
        """Every rank's ``payload`` on rank 0 (``None`` elsewhere); returns once rank 0 has read
        them all, so the keys can go."""
        base = self._next(tag)
        self.store.set(f"{base}/{self.rank}", payload)
        keys = [f"{base}/{r}" for r in range(self.world_size)]
        out = list(self.store.multi_get(keys)) if self.rank == 0 else None
        self.barrier()
        if self.rank == 0:
            for k in keys:
                self.delete(k)
        return out

    def exchange(self, tag: str, values: Sequence[float]) -> list[list[float]]:
        """Every rank's list of floats (lengths may differ), in rank order."""
        blob = struct.pack(f"<{len(values)}d", *values)
        return [list(struct.unpack(f"<{len(b) // 8}d", b)) for b in self.exchange_bytes(tag, blob)]

    def barrier(self, tag: str = "bar") -> None:
        """Wait until every rank reaches the same barrier."""
        self.exchange_bytes(tag, b"")

    def share_counters(self) -> bool:
        """Keep counters and exchanges in shared memory from now on, when every rank can map
        one file (one host); returns whether they do. A collective: every rank calls it at the
        same point, before any counter is used."""
        # these build on this module
        from ._shm import map_shared
        from ._shm_counters import SharedCounters
        from ._shm_exchange import SharedExchange

        if self._counters is None and not self.solo:
            timeout = getattr(self.store, "timeout", None)  # a timedelta on torch's stores
            seconds = timeout.total_seconds() if timeout is not None else 300.0
            self._counters = SharedCounters.open(self, timeout_s=seconds)
            if self._counters is not None:  # the same on every rank: so is this collective
                nbytes = SharedExchange.nbytes(self.world_size)
                shared = map_shared(self, "mbx", nbytes, eligible=True)
                if shared is not None:
                    self._mailbox = SharedExchange(
                        shared,
                        self.store,
                        self.rank,
                        self.world_size,
                        timeout_s=seconds,
                    )
        return self._counters is not None

    @property
    def counters_shared(self) -> bool:
        """Whether counters live in shared memory (:meth:`share_counters` succeeded)."""
        return self._counters is not None

    def close(self) -> None:
        """Release the shared counters' mapping (the store is the caller's). Counters go back
        to the store; call it once every rank is done with them (after a closing barrier)."""
        if self._mailbox is not None:
            self._mailbox.close()
            self._mailbox = None
        if self._counters is not None:
            self._counters.close()
            self._counters = None

    def counter(self, key: str, add: int) -> int:
        """Add ``add`` to the shared counter ``key`` and return its new value."""
        if self._counters is not None:
            return int(self._counters.add(key, add))
        return int(self.store.add(key, add))

    def drop_counter(self, key: str) -> None:
        """Forget counter ``key`` once no rank reads it any more."""
        if self._counters is not None:
            self._counters.drop(key)
        else:
            self.delete(key)

    def delete(self, key: str) -> None:
        """Delete store key ``key`` (absent is fine)."""
        with contextlib.suppress(Exception):
            self.store.delete_key(key)


class SoloComm(Comm):
    """A world of one: exchanges return the rank's own values, counters live in a dict."""

    def __init__(self) -> None:
        super().__init__(None, 0, 1)
        self._local: dict[str, int] = {}

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        return [payload]

    def gather_bytes(self, tag: str, payload: bytes) -> list[bytes] | None:
        return [payload]

    def counter(self, key: str, add: int) -> int:
        self._local[key] = self._local.get(key, 0) + add
        return self._local[key]

    def drop_counter(self, key: str) -> None:
        self._local.pop(key, None)
