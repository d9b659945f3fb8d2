"""An averaging round of the cadence and async policies, from arrival to the next window's counts.

Every member ends its window with a :class:`WindowReport`; then, in the same order on every rank:

1. :meth:`AveragingRound.average` exchanges arrivals (batches run, data left, batches in hand;
   the wait is *idle* time; with shared memory each rank first copies its replica into its slot,
   *sync* time). When no rank holds batches, the pool counter read after the arrivals decides
   whether the epoch ended. Then it averages the replicas weighted by batches (*sync* time).
2. :meth:`AveragingRound.settle` exchanges each rank's numbers (compute, divergence, sync and
   boundary time, what it trained; at an epoch's end its wall time and evaluation) into the
   epoch's tally, and feeds the same numbers to the guard, ElChe, the meta-controller and the
   async overshoot. A window cut short by the epoch's end never grows the anchor.

So every member leaves with the same counts, anchor, tally and "epoch finished" verdict; ranks
that are not members (elastic runs) send nothing. Why: ARCHITECTURE-NOTES.md, ``_rounds``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ._average import Averager
from ._comm import Comm
from ._elche import ElChe
from ._errors import DdpError, PeerError
from ._gate import Overshoot, gate_keys
from ._guards import ActionKind, ConvergenceAction, DivergenceReport
from ._ledger import EpochTally, RankLedger, now

logger = logging.getLogger("flodl.ddp")
_BENCHED = (
    "ddp: rank %d adds less than its averaging rounds and waits cost the others (the other "
    "ranks add %.1f %% to the fastest, the rounds cost %.1f %%): it trains no batches for now; "
    "it sits out 1, 2, 4 ... epochs, longer where its return would cost more than it adds"
)


@dataclass(frozen=True)
class WindowReport:
    """How one rank's window ended: its number (names its gate keys), the batches it ran,
    whether it saw data left in the epoch (may be stale), whether it still holds batches of its
    own slice or of a claimed block, its training time (slowdown included), :func:`~._ledger.now`
    at the window's start, whether it stopped because it led by ``max_batch_diff``, and
    ``drained()``: whether the epoch's pool is all claimed (``None``: no pool)."""

    window: int
    done: int
    more: bool
    in_hand: bool
    compute_s: float
    started: float
    throttled: bool = False
    drained: Callable[[], bool] | None = None


@dataclass
class Arrival:
    """What every member agreed on in :meth:`AveragingRound.average`: the batches each rank ran
    (0 for a non-member), whether no member has data left in the epoch (``finished``) and
    whether some member's ran out (``cut``: the window was cut short), whether each rank holds
    batches it has not run (``holding``); ``times``: this rank's."""

    actual: list[int]
    finished: bool
    cut: bool
    times: dict[str, float] = field(default_factory=dict)
    holding: list[bool] = field(default_factory=list)


def left_early(rank: int, epoch: str) -> str:
    """What a rank that left ``epoch`` before its end is told, and tells the others."""
    return (
        f"rank {rank} left {epoch} before its end; every rank must run each epoch of "
        "session.epoch(n) to its end (the ranks count batches to know when to average)"
    )


def _members_of(got: Sequence[bytes], members: Sequence[int]) -> list[Any]:
    return [json.loads(b) if r in members and b else None for r, b in enumerate(got)]


@dataclass
class AveragingRound:
    """The round protocol for one rank (see the module doc)."""

    comm: Comm
    device: torch.device
    averager: Averager
    elche: ElChe
    guard: Any
    meta: Any
    overshoot: Overshoot
    tally: EpochTally
    ledger: RankLedger
    _told: set[int] = field(default_factory=set, init=False)  # ranks whose benching was logged

    @property
    def rank(self) -> int:
        return self.comm.rank

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def average(self, report: WindowReport, members: Sequence[int]) -> Arrival:
        """Stage 1 (module doc): arrivals, then the weighted average of the members."""
        t_end, sent = now(), self.averager.bytes_sent
        self._synchronize()
        self.averager.stage()  # with shared memory the slot is written before the arrival
        staged = now()
        mine = {"done": report.done, "more": report.more, "hand": report.in_hand}
        got = _members_of(self.comm.exchange_bytes("n", json.dumps(mine).encode()), members)
        here = [g for g in got if g is not None]
        for g in here:
            if "left" in g:
                raise PeerError(left_early(g["left"], "the epoch"), rank=self.rank)
        actual = [g["done"] if g is not None else 0 for g in got]
        holding = [bool(g is not None and g["hand"]) for g in got]
        finished = not any(g["more"] for g in here)
        if not finished and report.drained is not None and not any(g["hand"] for g in here):
            finished = report.drained()
        benched = self.elche.benched  # no data, no window to cut (nor, in feed, a round to price)
        cut = not all(g["more"] for r, g in enumerate(got) if g is not None and r not in benched)
        idle_end = now()
        total = sum(actual)
        weights = [
            a / total if total > 0 else (1.0 / len(members) if r in members else 0.0)
            for r, a in enumerate(actual)
        ]
        div = self.averager.average(weights, members, self.rank)
        self._synchronize()
        sync_end = now()
        led, sent = self.ledger, self.averager.bytes_sent - sent
        idle, sync = idle_end - staged, sync_end - idle_end + staged - t_end
        led.add(
            comm_bytes=sent, compute=report.compute_s, idle=idle, sync=sync, batches=report.done
        )
        led.span("compute", report.started, t_end)
        if self.averager.shared:
            led.span("sync", t_end, staged)
        led.span("idle", staged, idle_end)
        led.span("sync", idle_end, sync_end)
        secs = {"ms": report.compute_s, "sync_ms": sync, "boundary_ms": sync_end - t_end}
        times = {"div": div, **{k: v * 1000.0 for k, v in secs.items()}}
        return Arrival(actual, finished, cut, times, holding)

    def settle(
        self,
        arrival: Arrival,
        members: Sequence[int],
        report: WindowReport,
        lr: float,
        numbers: dict[str, Any],
    ) -> None:
        """Stage 2 (module doc): every rank's numbers into the tally and the controllers."""
        payload = json.dumps({**arrival.times, **numbers}).encode()
        got = _members_of(self.comm.exchange_bytes("s", payload), members)
        if self.rank == min(members) and report.window > 2:
            for key in gate_keys(report.window - 2):
                self.comm.drop_counter(key)
        self.tally.add(got)
        self.tally.syncs += 1
        self.tally.sync_ms.append(max(g["sync_ms"] for g in got if g is not None))
        self.feed(arrival, got, members, report.throttled, lr)

    def tell_benched(self, r: int) -> None:
        """ElChe benched rank ``r``: said once in the log, and in the timeline each time."""
        _, gain, overhead = self.elche.last_bench or (r, 0.0, 0.0)
        if self.rank == min(self.elche.members):
            self.ledger.event("benched", rank=r, gain=gain, overhead=overhead)
            if r not in self._told:
                self._told.add(r)
                logger.warning(_BENCHED, r, 100 * gain, 100 * overhead)

    def feed(
        self, arrival: Arrival, got: list[Any], members: Sequence[int], throttled: bool, lr: float
    ) -> None:
        """The round's numbers (identical on every rank) to guard, ElChe, meta, overshoot."""
        actual, here = arrival.actual, [g for g in got if g is not None]
        divs = [g["div"] for g in here]
        elche = self.elche
        before, benched = elche.anchor, elche.benched
        action = self.guard.report(DivergenceReport(per_rank=divs), max(actual), max(actual))
        if not isinstance(action, ConvergenceAction):
            raise DdpError(
                f"the guard {type(self.guard).__name__} returned {action!r}; a guard's report() "
                "must return a ConvergenceAction (STABLE, SUPPRESS_GROWTH or nudge_down(f))"
            )
        if action.kind is ActionKind.NUDGE_DOWN:
            elche.nudge_anchor_down(float(action.factor or 0.5))
        elif action.kind is ActionKind.STABLE and elche.relax_up:
            elche.relax_anchor_up()
        walls = [g["ms"] if g is not None else 0.0 for g in got]
        boundary = max(g["boundary_ms"] for r, g in enumerate(got) if g and r not in benched)
        growth, holding = action.allows_growth, arrival.holding or None
        elche.report_timing(
            walls, actual, boundary, allow_growth=growth, cut=arrival.cut, holding=holding
        )
        if self.meta is not None:
            factor = self.meta.observe(lr, elche.anchor, action, elche.phase)
            if factor is not None:
                elche.nudge_anchor_down(factor)
        stable = action.kind is ActionKind.STABLE
        self.overshoot.after_round(stable, elche.anchor)
        for r in set(elche.benched) - set(benched):
            self.tell_benched(r)
        led = self.ledger
        if self.rank == min(members):
            led.event("sync", sync_ms=max(g["sync_ms"] for g in here), d_max=max(divs))
            if elche.anchor != before:
                led.event("anchor_changed", old=before, new=elche.anchor)
            if not stable:
                telemetry = getattr(self.guard, "telemetry", dict)()
                led.event("guard", verdict=action.kind.value, **telemetry)
        if throttled:
            led.event("throttle", rank=self.rank)
