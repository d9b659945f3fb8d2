"""An averaging round of the cadence and async policies, from arrival to the next window's counts.

Every rank calls :meth:`AveragingRound.close` at the end of its window with the batches it ran.
The round then, in the same order on every rank:

1. exchanges arrivals (batches run, whether the rank has data left, whether it holds batches
   of its own or of a claimed block; through shared memory on one host, else the store) — the
   wait here is *idle* time; with same-host shared memory each rank first copies its replica
   into its slot (*sync* time), and the exchange tells the others that it is there. A rank's
   "data left" can be stale: it saw unclaimed pool blocks when it stopped, and a peer then
   claimed and ran them all. So when no rank holds batches, the shared pool counter settles
   it, read after the arrivals: no rank claims between the arrival exchange and the next one,
   so every rank reads the same value and an epoch does not end with an empty window (a whole
   averaging round, ~1 ms a logistic-regression epoch of ~30 ms, for nothing);
2. averages the replicas, weighted by batches (:class:`~flodl_ddp._average.Averager`) — *sync*
   time;
3. exchanges the window's compute time, divergence, sync time and boundary time (idle plus
   sync: what the window boundary cost, as a blocking collective would measure it), and feeds
   these numbers, identical on every rank, to the guard, ElChe (whose overhead is the slowest
   rank's boundary time over the longest compute time), the meta-controller and the async
   overshoot. The last window of an epoch, cut short where a rank's data ran out, never grows
   ElChe's anchor: its overhead reading is a short window's, not the anchor's.

So every rank leaves the round with the same counts, anchor and "epoch finished" verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ._average import Averager
from ._comm import Comm
from ._elche import ElChe
from ._gate import gate_keys
from ._ledger import EpochLedger, now
from ._policy import Overshoot
from ._verdicts import GuardStep


@dataclass(frozen=True)
class RoundResult:
    """What every rank agrees on after a round."""

    actual: list[int]
    """Batches each rank ran in the window."""
    finished: bool
    """No rank has data left in the epoch."""


class AveragingRound:
    """The round protocol for one rank (see the module doc)."""

    def __init__(
        self,
        rank: int,
        world: int,
        comm: Comm,
        device: torch.device,
        averager: Averager,
        elche: ElChe,
        guard: Any,
        meta: Any,
        overshoot: Overshoot,
    ) -> None:
        self.rank = rank
        self.world = world
        self.comm = comm
        self.device = device
        self.averager = averager
        self.elche = elche
        self.guard = guard
        self.meta = meta
        self.overshoot = overshoot

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def close(
        self,
        window: int,
        done: int,
        more: bool,
        compute_s: float,
        throttled: bool,
        lr: float,
        ledger: EpochLedger,
        window_start: float,
        in_hand: bool | None = None,
        drained: Callable[[], bool] | None = None,
    ) -> RoundResult:
        """End window ``window``: this rank ran ``done`` batches in ``compute_s`` seconds and
        has (``more``) or has not data left; the ledger gets the round's times and spans.

        ``in_hand``: whether the rank still holds batches (of its own slice or of a claimed
        block), as opposed to only having seen unclaimed pool blocks (default: ``more``).
        ``drained()``: whether the epoch's pool is all claimed, read after every rank has
        arrived (the same answer on every rank); ``None``: ``more`` is taken as it is.
        """
        if in_hand is None:
            in_hand = more
        compute_end = now()
        sent = self.averager.bytes_sent
        # With shared memory the rank's copy goes into its slot before it says it has arrived
        self._synchronize()
        self.averager.stage()
        staged = now()
        got = self.comm.exchange("n", [float(done), float(more), float(in_hand)])
        actual = [int(v[0]) for v in got]
        finished = not any(v[1] for v in got)
        if not finished and drained is not None and not any(v[2] for v in got):
            finished = drained()
        # A rank whose share of the epoch ran out ran a short window and then waited: its
        # boundary over so little compute says nothing about how long a window should be.
        cut = not all(v[1] for v in got)
        idle_end = now()
        total = sum(actual)
        weights = [a / total if total > 0 else 1.0 / self.world for a in actual]
        div = self.averager.average(weights[self.rank], weights)
        self._synchronize()
        ledger.comm_bytes += self.averager.bytes_sent - sent
        sync_end = now()
        sync_ms = (sync_end - idle_end + staged - compute_end) * 1000.0
        # What the boundary cost this rank: the wait for the others plus the averaging, as a
        # blocking collective would measure it. ElChe tunes the window length against this.
        boundary_ms = (sync_end - compute_end) * 1000.0
        stats = self.comm.exchange("s", [compute_s * 1000.0, div, sync_ms, boundary_ms])
        if self.rank == 0 and window > 2:
            for key in gate_keys(window - 2):
                self.comm.drop_counter(key)
        self._feed(actual, stats, throttled, cut, lr, ledger)
        ledger.compute += compute_s
        ledger.idle += idle_end - staged
        ledger.sync += sync_ms / 1000.0
        ledger.batches += done
        ledger.syncs += 1
        ledger.sync_max_ms.append(max(s[2] for s in stats))
        ledger.span("compute", window_start, compute_end)
        if self.averager.shared:
            ledger.span("sync", compute_end, staged)
        ledger.span("idle", staged, idle_end)
        ledger.span("sync", idle_end, sync_end)
        return RoundResult(actual, finished)

    def _feed(
        self,
        actual: list[int],
        stats: list[list[float]],
        throttled: bool,
        cut: bool,
        lr: float,
        ledger: EpochLedger,
    ) -> None:
        """The round's numbers (identical on every rank) to guard, ElChe, meta, overshoot.
        A window cut short by the epoch's end (``cut``) never grows the anchor."""
        walls = [s[0] for s in stats]
        divs = [s[1] for s in stats]
        sync_ms = max(s[2] for s in stats)
        boundary_ms = max(s[3] for s in stats)
        elche = self.elche
        before = elche.anchor
        verdict: GuardStep = self.guard.report(divs, max(actual))
        if verdict.nudge is not None:
            elche.nudge_anchor_down(verdict.nudge)
        elif verdict.stable and elche.relax_up:
            elche.relax_anchor_up()
        grow = verdict.allow_growth and not cut
        elche.report_timing(walls, actual, boundary_ms, allow_growth=grow)
        if self.meta is not None:
            factor = self.meta.observe(lr, elche.anchor, verdict.action, elche.phase)
            if factor is not None:
                elche.nudge_anchor_down(factor)
        self.overshoot.after_round(verdict.stable, elche.anchor)
        if self.rank == 0:
            ledger.event("sync", sync_ms=sync_ms, d_max=max(divs))
            if elche.anchor != before:
                ledger.event("anchor_changed", old=before, new=elche.anchor)
            if not verdict.stable:
                ledger.event("guard", verdict=verdict.name, **self.guard.telemetry())
        if throttled:
            ledger.event("throttle", rank=self.rank)
