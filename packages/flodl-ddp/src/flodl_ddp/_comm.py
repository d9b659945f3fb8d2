"""The ranks' control channel (:class:`Comm`): small exchanges and atomic counters, through a
store rather than a collective (faster for small numbers). Every rank calls the same exchanges
in the same order, so a per-exchange sequence number names the keys.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ._errors import PeerError


class Comm:
    """Exchanges and counters of rank ``rank`` of ``world_size`` (subclasses move the bytes).
    ``has_counters``: whether :meth:`counter` works (claims and ready counts)."""

    has_counters = True

    def __init__(self, rank: int, world_size: int) -> None:
        self.rank, self.world_size, self._seq = rank, world_size, 0

    def _next(self, tag: str) -> str:
        self._seq += 1
        return f"{tag}{self._seq}"

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        """Every rank's ``payload`` for this exchange, in rank order (blocks for all of them)."""
        raise NotImplementedError

    def post(self, tag: str, payload: bytes) -> None:
        """This rank's ``payload`` for the next exchange ``tag``, without waiting for the others
        (a rank that stops training tells the others at the exchange they will reach)."""

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
    """Exchanges and counters through a ``torch.distributed`` store (already prefixed). A rank
    deletes its key of exchange ``n - 2`` when it completes exchange ``n``: every rank has read it
    by then (a rank writes key ``n - 1`` only after reading all of ``n - 2``)."""

    def __init__(self, store: Any, rank: int, world_size: int, timeout_s: float = 300.0) -> None:
        super().__init__(rank, world_size)
        self.store, self.timeout_s = store, timeout_s
        self._mine: list[str] = []

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        base = self._next(tag)
        keys = [f"{base}/{r}" for r in range(self.world_size)]
        self.store.set(keys[self.rank], payload)
        try:
            out = list(self.store.multi_get(keys))  # blocks up to the store's timeout
        except Exception as e:
            if "timeout" not in str(e).lower() and "timed out" not in str(e).lower():
                raise
            missing: list[int] | str = "unknown"
            with contextlib.suppress(Exception):
                missing = [r for r, k in enumerate(keys) if not self.store.check([k])]
            raise PeerError(
                f"exchange {tag!r} timed out after {self.timeout_s:g} s waiting for ranks "
                f"{missing} (stopped, hung or dead?)",
                rank=self.rank,
            ) from e
        self._mine.append(keys[self.rank])
        if len(self._mine) > 2:
            self.drop_counter(self._mine.pop(0))
        return out

    def post(self, tag: str, payload: bytes) -> None:
        self.store.set(f"{self._next(tag)}/{self.rank}", payload)

    def counter(self, key: str, add: int) -> int:
        return int(self.store.add(key, add))

    def drop_counter(self, key: str) -> None:
        with contextlib.suppress(Exception):  # cleanup only: a store that cannot delete keeps it
            self.store.delete_key(key)


class SoloComm(Comm):
    """A world of one: exchanges return the rank's own values, counters live in a dict."""

    def __init__(self) -> None:
        super().__init__(0, 1)
        self._local: dict[str, int] = {}

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        return [payload]

    def counter(self, key: str, add: int) -> int:
        if add:  # a read never writes: another thread may add (stop(after_epoch=True))
            self._local[key] = self._local.get(key, 0) + add
        return self._local.get(key, 0)

    def drop_counter(self, key: str) -> None:
        self._local.pop(key, None)
