"""Whether the slowest training rank pays for itself over a whole epoch (ElChe's round rule judges
no window the epoch's end cut, so none on epochs shorter than a window), and how long a benched
rank sits out. From the epoch's numbers (identical on every rank):

- the fastest training rank computed ``c`` ms for its ``n`` batches in its epoch of ``wall`` ms;
  the slowest one ran ``n_s`` batches, which **saved** the fastest ``n_s · c / n`` ms of work,
  while the fastest **spent** ``wall - c`` ms not computing (rounds, waits, pool claims), of
  which it **waited** ``w`` at the rounds' arrivals;
- ``without``: what the fastest spent not computing in the last epoch the slowest sat out in
  full; before any, ``spent - waited`` (a benched rank still joins the rounds: only the waits
  go with it);
- the slowest pays for itself when ``saved > spent - without``; otherwise it is benched. ElChe
  judges from Stable on; before, only a slowest rank one of whose batches **outlasts** ``c``.

A benched rank sits out ``max(length, floor)`` epochs (benched mid-epoch: the rest of it counts
as one). ``length`` starts at 1 and doubles, up to ``MAX_SIT_OUT``, each time a rank is benched
in the epoch it came back in; an epoch in which the slowest pays sets it back to 1. ``floor =
ceil(ms_s² / (ms_f · wall))`` (its and the fastest's ms per batch, the last judged ``wall``): a
return costs the fastest up to one batch of the rank, which it adds back in that many epochs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

MAX_SIT_OUT = 16
"""The longest a benched rank sits out, in epochs."""


@dataclass(frozen=True)
class EpochCost:
    """One epoch's verdict inputs (milliseconds): ``slowest`` rank, what its batches ``saved``
    the fastest, what the fastest ``spent`` not computing, of it ``waited`` at arrivals, the
    fastest's ``wall``, and whether one batch of the slowest ``outlasts`` the fastest's compute."""

    slowest: int
    saved: float
    spent: float
    waited: float
    wall: float
    outlasts: bool = False


def epoch_cost(
    wall_ms: Sequence[float],
    batches: Sequence[int],
    compute_ms: Sequence[float],
    idle_ms: Sequence[float],
    ranks: list[int],
) -> EpochCost | None:
    """The verdict inputs of an epoch over the training ``ranks`` (module doc), from per-rank
    epoch walls, batches, compute and idle times (one rank: it is both the fastest and the
    slowest); ``None`` when no rank ran a batch (or the fastest sent no wall)."""
    ran = [r for r in ranks if batches[r] > 0 and compute_ms[r] > 0]
    ms = {r: compute_ms[r] / batches[r] if r in ran else float("inf") for r in ranks}
    fast = min(ran, key=lambda r: (ms[r], r), default=None)
    if fast is None or wall_ms[fast] <= 0:
        return None
    slow = max(ranks, key=lambda r: (ms[r], r))
    spent = max(0.0, wall_ms[fast] - compute_ms[fast])
    lone = slow in ran and ms[slow] > compute_ms[fast]
    return EpochCost(slow, batches[slow] * ms[fast], spent, idle_ms[fast], wall_ms[fast], lone)


@dataclass
class SitOut:
    """How long the benched ranks sit out (module doc); ElChe keeps one for all of them."""

    length: int = 1
    """Epochs the next benching lasts."""
    left: int = 0
    """Epoch starts still to come before the benched ranks train again."""
    back: bool = False
    """The benched ranks came back at this epoch's start."""
    whole: bool = False
    """This epoch started with a rank benched: it sits out all of it."""
    without_ms: float | None = None
    """What the fastest rank spent not computing in the last epoch sat out in full."""
    wall_ms: float | None = None
    """The fastest rank's wall time in the last epoch judged."""

    def bench(self, *, at_end: bool, slow_ms: float = 0.0, fast_ms: float = 0.0) -> None:
        """A rank whose batch takes ``slow_ms`` (the fastest's ``fast_ms``) was benched."""
        if self.back:
            self.length = min(2 * self.length, MAX_SIT_OUT)
        self.back = False
        floor = math.ceil(slow_ms**2 / (fast_ms * self.wall_ms)) if fast_ms and self.wall_ms else 1
        self.left = max(self.length, floor) - (0 if at_end else 1)

    def epoch_start(self, benched: bool) -> bool:
        """A new epoch (``benched``: some rank is benched): whether the benched train again."""
        self.whole = benched and self.left > 0
        self.back = benched and not self.whole
        self.left = max(0, self.left - 1)
        return self.back

    def paid(self) -> None:
        """The slowest rank paid for itself over a whole epoch."""
        self.length, self.back = 1, False

    def extra(self, cost: EpochCost) -> float:
        """What the slowest rank cost the fastest beyond its own floor: ``spent - without``."""
        return cost.waited if self.without_ms is None else cost.spent - self.without_ms

    def pays(self, cost: EpochCost) -> bool:
        """Whether ``cost``'s slowest rank pays for itself (module doc)."""
        return cost.saved > self.extra(cost)

    @classmethod
    def from_state(cls, v: dict[str, Any]) -> SitOut:
        """Back from ``dataclasses.asdict`` (a checkpoint's plain JSON types)."""
        ints, flags = (int(v["length"]), int(v["left"])), (bool(v["back"]), bool(v["whole"]))
        ms = [None if v.get(k) is None else float(v[k]) for k in ("without_ms", "wall_ms")]
        return cls(*ints, *flags, *ms)
