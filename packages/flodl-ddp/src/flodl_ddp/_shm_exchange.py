"""Same-host exchanges of a few numbers through shared memory instead of the store.

Every averaging round of cadence and async makes two small exchanges (the ranks' arrivals,
then their timings). Through the ``TCPStore`` each is a ``set`` and a ``multi_get`` served by a
thread of the launching process, which on a host whose cores the ranks keep busy must first be
scheduled: measured between two ranks bound to the two cores of a 2-core VM, 0.50-0.66 ms
(median) for an exchange both ranks reached together and 0.67 ms on top of the wait when one
came 0.3 ms later. Through this mailbox: 0.01-0.09 ms and 0.1 ms. On a logistic-regression
epoch of ~30 ms with two rounds, that is ~2 ms an epoch.

Layout: two *parities* (exchange ``k`` uses ``k % 2``), each with one row per rank of
``1 + MAX_VALUES`` float64 (the length, then the values). Exchange ``k``: a rank writes its
row, then adds one to the shared counter ``mx<k>`` (:mod:`flodl_ddp._shm_counters`, whose lock
orders the row's writes before the count on every architecture); it polls the counter until
every rank has, then reads every row. Two parities suffice: a rank writes parity ``k % 2`` again
at exchange ``k + 2``, which it reaches only after every rank has arrived at ``k + 1``, that
is, after every rank has read exchange ``k``.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence

import numpy as np

from ._errors import DdpError
from ._shm import HEADER_BYTES, SharedFile
from ._shm_counters import SharedCounters, release_mapping

MAX_VALUES = 16
"""The most numbers one rank sends in one exchange."""

SPIN_S = 2e-4
"""How long a waiting rank polls back to back (yielding its core) before it polls asleep:
peers that arrive together are then seen within microseconds, and a long wait costs no core."""
POLL_SLEEP_S = 5e-5
"""The pause between polls after that (the shortest sleep lasts ~0.1 ms more on Linux)."""


class SharedExchange:
    """Exchanges of up to :data:`MAX_VALUES` floats among the ranks of one host.

    Args:
        shared: the mailbox file (:func:`flodl_ddp._shm.map_shared`, :meth:`nbytes` long).
        counters: the ranks' shared counters (arrivals are counted there).
        rank: this rank.
        world: the number of ranks.
        timeout_s: the longest wait for the other ranks before :class:`DdpError`.
    """

    def __init__(
        self,
        shared: SharedFile,
        counters: SharedCounters,
        rank: int,
        world: int,
        timeout_s: float = 300.0,
    ) -> None:
        self._shared = shared
        self._counters = counters
        self._rank = rank
        self._world = world
        self.timeout_s = float(timeout_s)
        # The descriptor is closed exactly once: by close(), or when this object is collected.
        self._release = weakref.finalize(self, release_mapping, shared.mm, shared.fd)
        count = 2 * world * (1 + MAX_VALUES)
        self._rows = np.frombuffer(
            shared.mm, dtype=np.float64, count=count, offset=HEADER_BYTES
        ).reshape(2, world, 1 + MAX_VALUES)

    @staticmethod
    def nbytes(world: int) -> int:
        return HEADER_BYTES + 8 * 2 * world * (1 + MAX_VALUES)

    @staticmethod
    def check(name: str, values: Sequence[float]) -> None:
        """Raise :class:`DdpError` when ``values`` do not fit a row (before the exchange takes
        a sequence number, so that the rank stays in step with the others)."""
        if len(values) > MAX_VALUES:
            raise DdpError(
                f"exchange {name!r}: {len(values)} values, more than the {MAX_VALUES} a "
                "shared-memory exchange carries"
            )

    def exchange(self, seq: int, name: str, values: Sequence[float]) -> list[list[float]]:
        """Every rank's ``values`` of exchange number ``seq`` (the same on every rank, one
        higher each time), in rank order. ``name`` is for the error messages."""
        self.check(name, values)
        n = len(values)
        row = self._rows[seq % 2, self._rank]
        row[0] = n
        row[1 : 1 + n] = values
        key = f"mx{seq}"
        counters = self._counters
        if counters.add(key, 1) < self._world:
            self._wait(key, name)
        rows = self._rows[seq % 2]
        out = [rows[r, 1 : 1 + int(rows[r, 0])].tolist() for r in range(self._world)]
        if self._rank == 0:
            # every rank arrived at seq, so every rank has read seq - 1: its counter can go
            counters.drop(f"mx{seq - 1}")
        return out

    def _wait(self, key: str, name: str) -> None:
        counters, world = self._counters, self._world
        start = time.monotonic()
        while time.monotonic() - start < SPIN_S:
            time.sleep(0)  # yields the core to whoever needs it
            if counters.add(key, 0) >= world:
                return
        deadline = start + self.timeout_s
        while counters.add(key, 0) < world:
            if time.monotonic() >= deadline:
                raise DdpError(
                    f"exchange {name!r}: waited {self.timeout_s:g} s for the other ranks "
                    f"({counters.add(key, 0)} of {world} arrived); a rank stopped or hung?"
                )
            time.sleep(POLL_SLEEP_S)

    def close(self) -> None:
        """Unmap the mailbox (the other ranks keep theirs)."""
        self._rows = np.empty((2, 0, 0), dtype=np.float64)  # views borrow the mapping
        self._release()
