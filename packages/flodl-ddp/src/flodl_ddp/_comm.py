"""The ranks' control channel: small exchanges and atomic counters.

Small numbers (arrivals, timings, losses, ready flags) need no collective: a store round trip
costs ~0.15 ms on loopback where a gloo ``all_gather`` costs 2-6 ms. Every rank calls the same
exchanges in the same order, so a per-exchange sequence number names the keys.

:class:`Comm` is the strategy the engine talks to; three implement it:

- :class:`StoreComm`: the run's ``TCPStore`` (spawned, torchrun and cluster runs). A rank deletes
  its own key of exchange ``n - 2`` when it completes exchange ``n`` (by then every rank has read
  it: a rank writes key ``n - 1`` only after reading all of ``n - 2``). An exchange that waits
  past the store's timeout names the ranks that never arrived.
- :class:`SoloComm`: a world of one; every exchange returns the rank's own values.
- :class:`~flodl_ddp._ft.FtComm`: elastic runs, through torchft's fault-tolerant all-reduce
  (no counters: an elastic window's work is planned up front).
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Sequence
from typing import Any

from ._errors import DdpError, PeerError


class Comm:
    """Exchanges and counters of rank ``rank`` of ``world_size`` (the shared part; subclasses
    move bytes). ``has_counters``: whether :meth:`counter` works (claims and ready counts)."""

    has_counters = True

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank = rank
        self.world_size = world_size
        self._seq = 0

    def _next(self, tag: str) -> str:
        self._seq += 1
        return f"{tag}{self._seq}"

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        """Every rank's ``payload`` for this exchange, in rank order (blocks for all of them)."""
        raise NotImplementedError

    def post(self, tag: str, payload: bytes) -> None:
        """This rank's ``payload`` for the next exchange ``tag``, without waiting for the others
        (a rank that stops training tells the others at the exchange they will reach)."""

    def exchange(self, tag: str, values: Sequence[float]) -> list[list[float]]:
        """Every rank's list of floats (lengths may differ), in rank order."""
        blob = struct.pack(f"<{len(values)}d", *values)
        return [list(struct.unpack(f"<{len(b) // 8}d", b)) for b in self.exchange_bytes(tag, blob)]

    def barrier(self, tag: str = "bar") -> None:
        """Wait until every rank reaches the same barrier."""
        self.exchange_bytes(tag, b"")

    def counter(self, key: str, add: int) -> int:
        """Add ``add`` to the shared counter ``key`` and return its new value."""
        raise NotImplementedError

    def drop_counter(self, key: str) -> None:
        """Forget counter ``key`` once no rank reads it any more."""

    def close(self) -> None:
        """Release what the channel holds (the store itself is the caller's)."""


class StoreComm(Comm):
    """Exchanges and counters through a ``torch.distributed`` store (already prefixed)."""

    def __init__(self, store: Any, rank: int, world_size: int, timeout_s: float = 300.0) -> None:
        super().__init__(rank, world_size)
        self.store = store
        self.timeout_s = timeout_s
        self._mine: list[str] = []

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        base = self._next(tag)
        mine = f"{base}/{self.rank}"
        keys = [f"{base}/{r}" for r in range(self.world_size)]
        self.store.set(mine, payload)
        try:
            out = list(self.store.multi_get(keys))  # blocks up to the store's timeout
        except Exception as e:
            if "timeout" not in str(e).lower() and "timed out" not in str(e).lower():
                raise
            raise self._timed_out(tag, keys) from e
        self._mine.append(mine)
        while len(self._mine) > 2:
            old = self._mine.pop(0)
            # cleanup only: a store that cannot delete keeps a few bytes
            with contextlib.suppress(Exception):
                self.store.delete_key(old)
        return out

    def post(self, tag: str, payload: bytes) -> None:
        self.store.set(f"{self._next(tag)}/{self.rank}", payload)

    def _timed_out(self, tag: str, keys: list[str]) -> DdpError:
        """The error of an exchange whose wait ran out: it names the ranks that never came."""
        missing: list[int] | str = "unknown"
        with contextlib.suppress(Exception):
            missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
        return PeerError(
            f"exchange {tag!r} timed out after {self.timeout_s:g} s waiting for ranks {missing} "
            "(stopped, hung or dead?)",
            rank=self.rank,
        )

    def counter(self, key: str, add: int) -> int:
        return int(self.store.add(key, add))

    def drop_counter(self, key: str) -> None:
        with contextlib.suppress(Exception):
            self.store.delete_key(key)


class SoloComm(Comm):
    """A world of one: exchanges return the rank's own values, counters live in a dict."""

    def __init__(self) -> None:
        super().__init__(0, 1)
        self._local: dict[str, int] = {}

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        return [payload]

    def counter(self, key: str, add: int) -> int:
        self._local[key] = self._local.get(key, 0) + add
        return self._local[key]

    def drop_counter(self, key: str) -> None:
        self._local.pop(key, None)
