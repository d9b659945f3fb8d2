"""ElChe: "the column marches at the slowest one's pace".

Deterministic, no process group: every rank keeps an identical copy fed the same all-gathered
numbers, so all decide alike. Timings go in (:meth:`ElChe.report_timing`), the next window's counts
and anchor come out. In brief (in full, with why: ARCHITECTURE-NOTES.md, ``_elche``):

- each rank's ms per batch goes into a trust window of its last ``WINDOW`` readings; its first
  reading into an empty window is provisional (one-off start-up costs) and the next replaces it;
- a report after which every training member has a reading calibrates (phases Probe, Warmup,
  Stable, Mature); the anchor rank is elected from the slow cohort (within ``COHORT_BAND`` of the
  slowest; a challenger must be ``DOMINANCE_MARGIN`` slower to take over);
- from Stable on the anchor follows ``overhead = sync_ms / max(wall_ms)`` toward
  ``min(overhead_target, gain / 2)``, and a rank that costs more than it adds is benched
  (0 batches, weight 0), but never while it holds batches it has not run (they are its alone:
  benched, it would never run them): judged per round once the anchor is capped, and per epoch
  (:meth:`ElChe.judge_epoch`, for epochs shorter than a window); it sits out 1, 2, 4 ... epochs
  (``_payoff``) and :meth:`ElChe.reprobe` lets it train again;
- the anchor rank runs ``anchor`` batches, rank ``r`` ``round(anchor · slow_ms / ms_r)``, moved
  only outside a ``DEAD_ZONE`` and by at most ``max_batch_diff`` (0: lockstep);
- a non-member (:meth:`ElChe.set_members`) runs 0 batches; a (re)joining rank is measured afresh;
- before calibration every rank runs ``anchor`` batches, or as ``speed_hint`` says.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, is_dataclass
from typing import Any

from flodl_core import CheckpointError, ConfigError, check_finite, check_int

from ._errors import check_state_keys
from ._options import check_option, check_ratios, check_speed_hint
from ._payoff import SitOut, epoch_cost
from ._worklist import cut_to

WINDOW = 5
"""Readings kept per rank (the trust window)."""
MAX_MISSES = 5
"""Consecutive invalid readings that clear a rank's window."""
COHORT_BAND = 0.15
"""Ranks within this fraction of the slowest form the slow cohort."""
DOMINANCE_MARGIN = 0.10
"""A challenger must be this much slower than the current anchor rank to take over."""
DEAD_ZONE = 0.05
"""A count moves only when its target differs by more than this fraction of it."""
STABLE_AT = 5
MATURE_AT = 20
SHARE_HISTORY = 10
"""Count snapshots averaged by :meth:`ElChe.recent_batch_share`."""
OVERHEAD_TARGET_RANGE = (0.01, 0.50)


class Phase(enum.IntEnum):
    """ElChe's maturity, by number of calibrations: 0, 1-4, 5-19, 20+."""

    PROBE = 0
    WARMUP = 1
    STABLE = 2
    MATURE = 3


def _slow_cohort(smoothed: Sequence[float | None]) -> list[int]:
    """The ranks with ``ms >= (1 - COHORT_BAND) · slowest`` (those without a reading left out)."""
    band = (1 - COHORT_BAND) * max(ms for ms in smoothed if ms is not None)
    return [r for r, ms in enumerate(smoothed) if ms is not None and ms >= band]


def _round_half_up(x: float) -> int:
    """``x`` rounded, halves up (Python's round() sends them to the even integer)."""
    return math.floor(x + 0.5)


def _plain(v: Any) -> Any:
    """``v`` in plain JSON types: deques and lists (nested too) as lists, a dataclass as a dict."""
    if is_dataclass(v) and not isinstance(v, type):
        return asdict(v)
    return [_plain(x) for x in v] if isinstance(v, (list, deque)) else v


class ElChe:
    """Per-rank batch counts between averagings, from measured speeds.

    Args:
        world_size: number of ranks (>= 1).
        anchor: batches the slow (anchor) rank runs per window at the start (>= 1).
        overhead_target: the share of a window's compute time the averaging may cost; clamped
            into [0.01, 0.50].
        max_anchor: the auto-tune's upper bound for the anchor.
        min_anchor: its lower bound (default: the initial ``anchor``);
            :meth:`nudge_anchor_down` may go below it.
        max_batch_diff: the most a count may change in one update, and the most batches a rank
            may lead the slowest by (:meth:`throttled`); 0 = lockstep (every rank runs
            ``anchor`` batches). ``None``: no limit.
        relax_up: allow :meth:`relax_anchor_up`.
        speed_hint: ``(slow_rank, ratio)``: before any measurement, ``slow_rank`` anchors and
            every other rank is ``ratio`` times faster (it runs ``round(anchor · ratio)``).
        partition_ratios: per-rank data shares; before calibration they are the
            :meth:`throughput_shares` and the rank with the smallest one anchors (unless
            ``speed_hint`` names one).
    """

    def __init__(
        self,
        world_size: int,
        anchor: int = 10,
        *,
        overhead_target: float = 0.05,
        max_anchor: int = 1000,
        min_anchor: int | None = None,
        max_batch_diff: int | None = None,
        relax_up: bool = False,
        speed_hint: tuple[int, float] | None = None,
        partition_ratios: Sequence[float] | None = None,
    ) -> None:
        self.world_size = check_int(world_size, "world_size", ge=1)
        check_int(anchor, "anchor", ge=1)
        self.max_anchor = top = check_int(max_anchor, "max_anchor", ge=1)
        lo = anchor if min_anchor is None else min_anchor
        self.min_anchor = lo = check_int(lo, "min_anchor", ge=1)
        if anchor > top:
            raise ConfigError(f"anchor={anchor} exceeds max_anchor={top}; raise max_anchor")
        if lo > anchor:
            raise ConfigError(f"min_anchor={lo} exceeds anchor={anchor}; lower min_anchor")
        target = check_finite(overhead_target, "overhead_target", gt=0.0)
        self.overhead_target = min(max(target, OVERHEAD_TARGET_RANGE[0]), OVERHEAD_TARGET_RANGE[1])
        self.max_batch_diff = check_option("max_batch_diff", max_batch_diff)
        self.relax_up = bool(relax_up)
        self._anchor, self._members = anchor, list(range(world_size))
        self._benched: list[int] = []
        self._sit_out = SitOut()
        self.last_bench: tuple[int, float, float] | None = None
        """``(rank, gain, overhead)`` of the last benching (see :attr:`benched`)."""
        self._hint_ratio, self._ratios, self._anchor_rank = self._seed(speed_hint, partition_ratios)
        n = self.world_size  # no reading yet: empty trust windows, no calibration
        self._windows: list[deque[float]] = [deque(maxlen=WINDOW) for _ in range(n)]
        self._provisional, self._misses = [False] * n, [0] * n
        self._settled = False  # a calibration made of settled readings only has happened
        self._calibrations = 0
        self._smoothed: list[float | None] = [None] * n
        self._slow_ms = 0.0
        self._overhead: float | None = None
        self._counts = self._cold_counts()
        self._history: deque[list[int]] = deque(maxlen=SHARE_HISTORY)

    def _seed(
        self, hint: tuple[int, float] | None, ratios: Sequence[float] | None
    ) -> tuple[float | None, list[float] | None, int | None]:
        """The cold start's hint ratio, partition ratios and anchor rank (module doc)."""
        n, shares, anchor_rank = self.world_size, None, None
        if ratios is not None:
            shares = list(check_ratios(ratios))
            if len(shares) != n:
                raise ConfigError(f"partition_ratios has {len(shares)} entries for world_size {n}")
            anchor_rank = min(range(n), key=lambda i: (shares[i], i))
        if hint is None:
            return None, shares, anchor_rank
        slow, ratio = check_speed_hint(hint)
        if slow >= n:
            raise ConfigError(f"speed_hint slow_rank {slow} is out of range for world_size {n}")
        return ratio, shares, slow

    @property
    def counts(self) -> list[int]:
        """Batches each rank runs in the next window."""
        return list(self._counts)

    @property
    def anchor(self) -> int:
        """Batches the anchor rank runs per window."""
        return self._anchor

    @property
    def anchor_rank(self) -> int:
        """The rank that sets the pace (the first member until one is elected or given)."""
        return self._members[0] if self._anchor_rank is None else self._anchor_rank

    @property
    def members(self) -> list[int]:
        """The ranks taking part (every rank unless :meth:`set_members` said otherwise)."""
        return list(self._members)

    @property
    def benched(self) -> list[int]:
        """Ranks that cost more than they add and train nothing (module doc)."""
        return list(self._benched)

    @property
    def calibrations(self) -> int:
        """Reports after which every rank had a reading."""
        return self._calibrations

    @property
    def calibrated(self) -> bool:
        return self._calibrations > 0

    @property
    def phase(self) -> Phase:
        """The maturity: how many of 1, ``STABLE_AT``, ``MATURE_AT`` calibrations were reached."""
        return Phase(sum(self._calibrations >= at for at in (1, STABLE_AT, MATURE_AT)))

    @property
    def ms_per_batch(self) -> list[float | None]:
        """Each rank's smoothed milliseconds per batch (mean of its window; ``None`` if empty)."""
        return [sum(w) / len(w) if w else None for w in self._windows]

    @property
    def overhead(self) -> float | None:
        """The last measured ``sync_ms / max(wall_ms)`` (``None`` before any)."""
        return self._overhead

    def outpaces_slow_cohort(self, rank: int) -> bool:
        """Whether ``rank`` is calibrated as faster than the slow cohort (``False`` before
        calibration, when nothing is known)."""
        if not self.calibrated or any(self._smoothed[r] is None for r in self._active()):
            return False
        return rank in self._active() and rank not in _slow_cohort(self._member_speeds())

    def anchor_wall_ms(self) -> float:
        """The window's expected wall time: ``anchor × slow_ms`` (0 before calibration)."""
        return self._anchor * self._slow_ms if self.calibrated else 0.0

    def gain(self) -> float:
        """What the training ranks other than the fastest add to its throughput, as a fraction
        of it (``1 / F`` for a pair whose second rank is ``F`` times slower); 0 before any
        measurement."""
        speeds = [1.0 / ms for ms in self._member_speeds() if ms]
        return (sum(speeds) - max(speeds)) / max(speeds) if speeds else 0.0

    def throughput_shares(self) -> list[float]:
        """Each rank's share of the throughput, ``(1/ms_r) / Σ 1/ms`` once calibrated; before,
        the normalised ``partition_ratios`` or equal shares. Sums to 1."""
        speeds, active = self._member_speeds(), self._active()
        if self.calibrated and all(speeds[r] is not None for r in active):
            inv = [1.0 / s if s else 0.0 for s in speeds]
        else:
            ratios = self._ratios or [1.0] * self.world_size
            inv = [x if r in active else 0.0 for r, x in enumerate(ratios)]
        return [x / sum(inv) for x in inv]

    def recent_batch_share(self) -> list[float]:
        """Each rank's share of the batches over the last 10 count snapshots (one per report);
        the current counts' share before any report."""
        snaps = list(self._history) or [self._counts]
        sums = [sum(s[r] for s in snaps) for r in range(self.world_size)]
        return [x / sum(sums) for x in sums]

    def clamp_total(self, max_total: int) -> list[int]:
        """The counts scaled down so they sum to at most ``max_total`` (e.g. the batches left in
        the epoch), as :func:`~._worklist.cut_to` does; the stored counts are not changed."""
        return cut_to(self._counts, check_int(max_total, "max_total", ge=0))

    def throttled(self, counts_done: Sequence[int]) -> list[int]:
        """Ranks that lead the slowest one by more than ``max_batch_diff`` batches in the
        current window (they should wait); empty when ``max_batch_diff`` is ``None``."""
        done = self._per_rank("counts_done", counts_done)
        if self.max_batch_diff is None:
            return []
        return [r for r, d in enumerate(done) if d - min(done) > self.max_batch_diff]

    def report_timing(
        self,
        wall_ms: Sequence[float],
        batches: Sequence[int],
        sync_ms: float,
        *,
        allow_growth: bool = True,
        cut: bool = False,
        holding: Sequence[bool] | None = None,
    ) -> None:
        """Feed one window's measurements (identical on every rank).

        Args:
            wall_ms: per rank, the compute time of the window in milliseconds (without the
                averaging).
            batches: per rank, the batches actually run in the window.
            sync_ms: what the averaging cost, in milliseconds.
            cut: the window was cut short by the epoch's end: its overhead is a short
                window's, so it neither grows the anchor nor benches a rank.
            allow_growth: ``False`` when a convergence guard asked to hold the anchor (its
                ``SuppressGrowth``): the auto-tune may then shrink the anchor but not grow it.
            holding: per rank, whether it holds batches it has not run; such a rank is not
                benched (``None``: none does).
        """
        walls = self._per_rank("wall_ms", wall_ms)
        done = self._per_rank("batches", batches)
        sync = check_finite(sync_ms, "sync_ms", ge=0.0)
        for r in self._members:
            if done[r] > 0 and walls[r] > 0:
                self._read(r, walls[r] / done[r])
            elif r not in self._benched:  # a benched rank is not expected to run: no miss
                self._misses[r] += 1
                if self._misses[r] >= MAX_MISSES:
                    self._forget(r)
        if all(self._windows[r] for r in self._active()):
            held = [bool(h) for h in holding] if holding is not None else [False] * len(done)
            self._calibrate(walls, sync, allow_growth and not cut, cut, held)
        self._history.append(list(self._counts))

    def _read(self, rank: int, ms: float) -> None:
        """One valid reading of ``rank``: the first into an empty window is provisional and the
        next replaces it."""
        window = self._windows[rank]
        if self._provisional[rank]:
            window.clear()
            self._provisional[rank] = False
        elif not window:
            self._provisional[rank] = True
        window.append(ms)
        self._misses[rank] = 0

    def _forget(self, rank: int) -> None:
        self._windows[rank].clear()
        self._provisional[rank] = False
        self._misses[rank] = 0

    def _calibrate(
        self, walls: list[float], sync_ms: float, allow_growth: bool, cut: bool, held: list[bool]
    ) -> None:
        self._calibrations += 1
        self._smoothed = self.ms_per_batch
        smoothed = self._member_speeds()
        settling = not self._settled and not any(self._provisional[r] for r in self._active())
        self._settled = self._settled or settling
        # an anchor elected (not given) at the first calibration came from a provisional reading
        given = self._hint_ratio is not None or self._ratios is not None
        if self._anchor_rank is None or self.phase >= Phase.STABLE or (settling and not given):
            self._anchor_rank = self._elect(smoothed)
        self._slow_ms = float(smoothed[self.anchor_rank])  # type: ignore[arg-type]
        if max(walls) > 0:
            self._overhead = sync_ms / max(walls)
            if self.phase >= Phase.STABLE:  # early windows are dominated by warm-up costs
                self._auto_tune(self._overhead, allow_growth)
                if not cut:
                    self._bench_if_costly(self._overhead, allow_growth, held)
        self._update_counts(first=self._calibrations == 1 or settling)

    def _active(self) -> list[int]:
        return [r for r in self._members if r not in self._benched]

    def _member_speeds(self) -> list[float | None]:
        active = self._active()
        return [s if r in active else None for r, s in enumerate(self._smoothed)]

    def _bench_if_costly(self, overhead: float, allow_growth: bool, held: list[bool]) -> None:
        """Bench the slowest training rank when the rounds cost more than the others add and
        longer windows cannot help any more, unless it holds batches (module doc)."""
        active, gain = self._active(), self.gain()
        capped = self._anchor >= self.max_anchor or not allow_growth
        if len(active) < 2 or not capped or gain > overhead:
            return
        slowest = max(active, key=lambda r: (self._smoothed[r] or 0.0, r))
        if not held[slowest]:
            self._bench(slowest, gain, overhead, at_end=False)

    def _bench(self, rank: int, gain: float, overhead: float, *, at_end: bool) -> None:
        self._benched.append(rank)
        self.last_bench = (rank, gain, overhead)
        speeds = [s for r in [*self._active(), rank] if (s := self._smoothed[r])] or [0.0]
        self._sit_out.bench(at_end=at_end, slow_ms=max(speeds), fast_ms=min(speeds))
        if self._anchor_rank == rank:
            self._anchor_rank = self._elect(self._member_speeds())
            self._slow_ms = float(self._smoothed[self._anchor_rank] or self._slow_ms)

    def judge_epoch(
        self,
        wall_ms: Sequence[float],
        batches: Sequence[int],
        compute_ms: Sequence[float],
        idle_ms: Sequence[float],
    ) -> None:
        """An epoch's end (identical on every rank): per rank its epoch's wall, compute and idle
        milliseconds and batches. A slowest rank that did not pay for itself over the epoch is
        benched (``_payoff``: from Stable on, before only if one of its batches outlasts it)."""
        cost = epoch_cost(wall_ms, batches, compute_ms, idle_ms, self._active())
        out = self._sit_out
        if cost is None or (self.phase < Phase.STABLE and not cost.outlasts):
            return
        out.wall_ms = cost.wall
        if out.whole:
            out.without_ms = cost.spent
        elif not self._benched and len(self._active()) > 1:
            if out.pays(cost):
                out.paid()
            else:
                extra = out.extra(cost)
                self._bench(cost.slowest, cost.saved / cost.wall, extra / cost.wall, at_end=True)
                self._update_counts(first=True)

    def reprobe(self) -> list[int]:
        """Each epoch's start: the benched ranks whose sit-out is over train again (this
        epoch's first window measures them anew); returns them."""
        if not self._sit_out.epoch_start(bool(self._benched)):
            return []
        back, self._benched = self._benched, []
        self._update_counts(first=True)
        return back

    def _elect(self, smoothed: list[float | None]) -> int:
        cohort = _slow_cohort(smoothed)
        current = self._anchor_rank
        if current is None or current not in cohort:
            return cohort[0]
        challenger = min(cohort, key=lambda r: (-smoothed[r], r))  # type: ignore[operator]
        if smoothed[challenger] > (1.0 + DOMINANCE_MARGIN) * smoothed[current]:  # type: ignore[operator]
            return challenger
        return current

    def _auto_tune(self, overhead: float, allow_growth: bool) -> None:
        target = min(self.overhead_target, max(self.gain() / 2, OVERHEAD_TARGET_RANGE[0]))
        if overhead > target:
            if allow_growth:
                grown = math.ceil(self._anchor * overhead / target)
                self._anchor = min(max(grown, self.min_anchor), self.max_anchor)
        elif overhead < target / 2 and self._anchor > self.min_anchor:
            self._anchor -= 1

    def _targets(self) -> list[int]:
        """Counts the current anchor asks for, before the dead zone and the per-update clamp (a
        (re)joined rank runs ``anchor`` until its first reading)."""
        if not self.calibrated:
            return self._cold_counts()
        out, active = [], self._active()
        for r, ms in enumerate(self._member_speeds()):
            if r not in active:
                out.append(0)
            elif r == self.anchor_rank or ms is None:
                out.append(self._anchor)
            else:
                out.append(max(1, _round_half_up(self._anchor * self._slow_ms / ms)))
        return out

    def _cold_counts(self) -> list[int]:
        fast = self._anchor
        if self._hint_ratio is not None:
            fast = max(1, _round_half_up(self._anchor * self._hint_ratio))
        active = self._active()
        return [
            (self._anchor if r == self.anchor_rank else fast) if r in active else 0
            for r in range(self.world_size)
        ]

    def _update_counts(self, *, first: bool) -> None:
        """Move the counts toward their targets: the anchor rank exactly, the others outside the
        dead zone only (skipped on the first calibration, when the cold-start counts are mere
        guesses), each by at most ``max_batch_diff``; lockstep: every rank runs ``anchor``."""
        active, diff = self._active(), self.max_batch_diff
        if diff == 0:
            self._counts = [self._anchor if r in active else 0 for r in range(self.world_size)]
            return
        new = []
        for r, (t, c) in enumerate(zip(self._targets(), self._counts, strict=True)):
            if r == self.anchor_rank or r not in active or c == 0:
                new.append(t)  # the anchor rank always runs exactly `anchor`; joiners start fresh
            elif not first and abs(t - c) <= DEAD_ZONE * c:
                new.append(c)
            else:
                new.append(max(1, t if diff is None else min(max(t, c - diff), c + diff)))
        self._counts = new

    def set_members(self, members: Sequence[int]) -> None:
        """The ranks taking part from the next window on (module doc). Every rank must call it
        with the same members at the same point."""
        new = sorted({check_int(r, "member", ge=0) for r in members})
        if not new or new[-1] >= self.world_size:
            raise ConfigError(f"members {list(members)} must be ranks of 0..{self.world_size - 1}")
        if new == self._members:
            return
        for r in set(new) - set(self._members):  # a (re)joining rank is measured afresh
            self._forget(r)
            self._smoothed[r] = None
        self._members = new
        self._benched = [r for r in self._benched if r in new]
        if self._anchor_rank not in new:
            speeds = self._member_speeds()
            known = any(s is not None for s in speeds)
            self._anchor_rank = _slow_cohort(speeds)[0] if known else new[0]
            self._slow_ms = float(speeds[self._anchor_rank] or self._slow_ms)
        self._update_counts(first=True)

    def nudge_anchor_down(self, factor: float) -> None:
        """Cut the anchor to ``max(1, min(anchor, ceil(anchor · clamp(factor, 0.1, 1.0))))``
        (a guard or the meta-controller saw the replicas drift); may go below ``min_anchor``.
        The counts follow at once."""
        f = min(max(check_finite(factor, "factor", ge=0.0), 0.1), 1.0)
        self._anchor = max(1, min(self._anchor, math.ceil(self._anchor * f)))
        self._update_counts(first=not self.calibrated)

    def relax_anchor_up(self) -> bool:
        """Grow the anchor by one toward ``max_anchor`` if ``relax_up`` is on; refused (``False``)
        at ``max_anchor`` or when the fastest rank's count would then lead the anchor by more
        than ``max_batch_diff``."""
        if not self.relax_up or self._anchor >= self.max_anchor:
            return False
        self._anchor, diff = self._anchor + 1, self.max_batch_diff
        if diff is not None and max(self._targets()) - self._anchor > diff:
            self._anchor -= 1
            return False
        self._update_counts(first=not self.calibrated)
        return True

    # (attribute, key, how a loaded value is read back); plain JSON types only
    _STATE: tuple[tuple[str, str, Callable[[Any], Any]], ...] = (
        ("_anchor", "anchor", int),
        ("_anchor_rank", "anchor_rank", lambda v: v),
        ("min_anchor", "min_anchor", int),
        ("max_anchor", "max_anchor", int),
        ("overhead_target", "overhead_target", float),
        ("max_batch_diff", "max_batch_diff", lambda v: v),
        ("relax_up", "relax_up", bool),
        ("_hint_ratio", "hint_ratio", lambda v: v),
        ("_ratios", "partition_ratios", lambda v: v),
        ("_windows", "windows", lambda v: [deque(map(float, w), maxlen=WINDOW) for w in v]),
        ("_misses", "misses", lambda v: [int(m) for m in v]),
        ("_calibrations", "calibrations", int),
        ("_provisional", "provisional", lambda v: [bool(p) for p in v]),
        ("_settled", "settled", bool),
        ("_smoothed", "smoothed", list),
        ("_slow_ms", "slow_ms", float),
        ("_overhead", "overhead", lambda v: v),
        ("_counts", "counts", lambda v: [int(c) for c in v]),
        ("_history", "history", lambda v: deque((list(h) for h in v), maxlen=SHARE_HISTORY)),
        ("_members", "members", lambda v: [int(r) for r in v]),
        ("_benched", "benched", lambda v: [int(r) for r in v]),
        ("_sit_out", "sit_out", SitOut.from_state),
    )

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue identically; plain JSON types only."""
        state = {key: _plain(getattr(self, attr)) for attr, key, _ in self._STATE}
        return {"world_size": self.world_size, **state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the world size must match."""
        if state.get("world_size") != self.world_size:
            raise CheckpointError(
                f"ElChe state is for world_size {state.get('world_size')}, this run has "
                f"{self.world_size}; resume with the same number of ranks"
            )
        check_state_keys("ElChe", state, (key for _, key, _ in self._STATE))
        for attr, key, read in self._STATE:
            setattr(self, attr, read(state[key]))

    def _per_rank(self, name: str, values: Sequence[Any]) -> list[Any]:
        vals = list(values)
        if len(vals) != self.world_size:
            raise ConfigError(f"{name} has {len(vals)} entries for {self.world_size} ranks")
        if name == "wall_ms":  # milliseconds; the others are batch counts
            return [check_finite(v, f"{name}[{r}]", ge=0.0) for r, v in enumerate(vals)]
        return [check_int(v, f"{name}[{r}]", ge=0) for r, v in enumerate(vals)]

    def __repr__(self) -> str:
        return (
            f"ElChe(world_size={self.world_size}, anchor={self._anchor}, "
            f"anchor_rank={self.anchor_rank}, counts={self._counts}, phase={self.phase.name})"
        )
