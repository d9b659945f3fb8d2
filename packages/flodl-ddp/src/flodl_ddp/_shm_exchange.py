"""Same-host exchanges of small messages through shared memory instead of the store.

Every averaging round of cadence and async makes two small exchanges (the ranks' arrivals,
then their timings), and every epoch ends with one (its metrics). Through the ``TCPStore``
each is a ``set`` and a ``multi_get`` served by a thread of the launching process, which on a
host whose cores the ranks keep busy must first be scheduled: between two ranks bound to the
two cores of a 2-core VM (``benchmarks/ddp_exchange.py``), 0.45-0.69 ms an exchange (median,
beyond any wait for the other rank) against 0.02-0.10 ms through this mailbox. On a
logistic-regression epoch of ~30 ms with two rounds, that was ~2 ms an epoch.

Layout: one int64 per rank, the last exchange it arrived at; then two *parities* (exchange
``k`` uses ``k % 2``), each with one row per rank: an int64 length, then up to
:data:`ROW_BYTES` bytes. Exchange ``k``: a rank writes its row, then sets its arrival to ``k``
under an exclusive ``flock`` of the file (the lock orders the row's writes before the arrival,
and the readers' reads after it, on every architecture); it polls until every rank has arrived
at ``k``, then reads every row. A longer message goes to the store under ``mx<k>/<rank>`` and
its row says so (length -1): each rank decides for its own message, and the readers follow.
Two parities suffice: a rank writes parity ``k % 2`` again at exchange ``k + 2``, which it
reaches only after every rank has arrived at ``k + 1``, that is, after every rank has read
exchange ``k``.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from typing import Any

import numpy as np

from ._errors import DdpError
from ._shm import HEADER_BYTES, SharedFile, hold_lock, release_mapping

ROW_BYTES = 4096
"""The longest message a row holds; longer ones go through the store."""
_HEAD = 8  # the row's int64 length; -1: the message is in the store

SPIN_S = 2e-4
"""How long a waiting rank polls back to back (yielding its core) before it polls asleep:
peers that arrive together are then seen within microseconds."""
POLL_SLEEP_S = 5e-5
"""The pause between polls after that (the shortest sleep lasts ~0.1 ms more on Linux)..."""
SLOW_POLL_AFTER_S = 5e-3
"""...until the wait has lasted this long (a peer evaluating, say): then one poll a
:data:`SLOW_POLL_S`, so that a long wait costs next to no CPU."""
SLOW_POLL_S = 1e-3


class SharedExchange:
    """Exchanges of short messages among the ranks of one host.

    Args:
        shared: the mailbox file (:func:`flodl_ddp._shm.map_shared`, :meth:`nbytes` long).
        store: the ranks' store, for messages longer than :data:`ROW_BYTES`.
        rank: this rank.
        world: the number of ranks.
        timeout_s: the longest wait for the other ranks before :class:`DdpError`.
    """

    def __init__(
        self,
        shared: SharedFile,
        store: Any,
        rank: int,
        world: int,
        timeout_s: float = 300.0,
    ) -> None:
        self._fd = shared.fd
        self._store = store
        self._rank = rank
        self._world = world
        self.timeout_s = float(timeout_s)
        self._in_store: list[tuple[int, str]] = []  # (exchange, key) of this rank's long ones
        # The descriptor is closed exactly once: by close(), or when this object is collected.
        self._release = weakref.finalize(self, release_mapping, shared.mm, shared.fd)
        self._arrived = np.frombuffer(shared.mm, dtype=np.int64, count=world, offset=HEADER_BYTES)
        self._rows = np.frombuffer(
            shared.mm,
            dtype=np.uint8,
            count=2 * world * (_HEAD + ROW_BYTES),
            offset=HEADER_BYTES + 8 * world,
        ).reshape(2, world, _HEAD + ROW_BYTES)

    @staticmethod
    def nbytes(world: int) -> int:
        return HEADER_BYTES + 8 * world + 2 * world * (_HEAD + ROW_BYTES)

    def exchange(self, seq: int, name: str, payload: bytes) -> list[bytes]:
        """Every rank's ``payload`` of exchange number ``seq`` (the same on every rank, one
        higher each time), in rank order. ``name`` is for the error messages."""
        row = self._rows[seq % 2, self._rank]
        n = len(payload)
        if n <= ROW_BYTES:
            row[_HEAD : _HEAD + n] = np.frombuffer(payload, dtype=np.uint8)
        else:
            key = f"mx{seq}/{self._rank}"
            self._store.set(key, payload)
            self._in_store.append((seq, key))
            n = -1
        row[:_HEAD].view(np.int64)[0] = n
        deadline = time.monotonic() + self.timeout_s
        with self._locked(name):
            self._arrived[self._rank] = seq
        self._wait(seq, name, deadline)
        rows = self._rows[seq % 2]
        out: list[bytes] = []
        for r in range(self._world):
            length = int(rows[r, :_HEAD].view(np.int64)[0])
            if length >= 0:
                out.append(rows[r, _HEAD : _HEAD + length].tobytes())
            else:
                out.append(self._store.get(f"mx{seq}/{r}"))
        # Every rank arrived at seq, so every rank has read seq - 1 and before: this rank's
        # long messages of those can go.
        while self._in_store and self._in_store[0][0] < seq:
            with contextlib.suppress(Exception):  # cleanup only
                self._store.delete_key(self._in_store.pop(0)[1])
        return out

    def _locked(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Hold the file's lock (:func:`flodl_ddp._shm.hold_lock`) until ``timeout_s``."""
        return hold_lock(self._fd, self.timeout_s, "shared exchanges", f"exchange {name!r}")

    def _all_arrived(self, seq: int, name: str) -> bool:
        with self._locked(name):
            return int(self._arrived.min()) >= seq

    def _wait(self, seq: int, name: str, deadline: float) -> None:
        """Until every rank has arrived at ``seq``: polled back to back for :data:`SPIN_S`,
        then asleep between polls, longer ones once the wait is long."""
        start = time.monotonic()
        while not self._all_arrived(seq, name):
            now = time.monotonic()
            if now >= deadline:
                arrived = int(np.count_nonzero(self._arrived >= seq))
                raise DdpError(
                    f"exchange {name!r}: waited {self.timeout_s:g} s for the other ranks "
                    f"({arrived} of {self._world} arrived); a rank stopped or hung?"
                )
            if now - start < SPIN_S:
                time.sleep(0)  # yields the core to whoever needs it
            else:
                time.sleep(POLL_SLEEP_S if now - start < SLOW_POLL_AFTER_S else SLOW_POLL_S)

    def close(self) -> None:
        """Unmap the mailbox (the other ranks keep theirs)."""
        # views borrow the mapping
        self._rows = np.empty((2, 0, 0), dtype=np.uint8)
        self._arrived = np.empty(0, dtype=np.int64)
        self._release()
