"""Per-rank time accounting from a run's timeline spans and events: busy, idle and why idle."""

from __future__ import annotations

from collections.abc import Iterable

from ._record import RankTime

#: How close (s) an idle span's end must be to a sync, or an epoch event to the span, to count.
NEAR_S = 0.005

Span = tuple[int, str, float, float]  # (rank, kind, start_s, end_s)
Event = tuple[str, float]  # (kind, t_s)


def rank_times(spans: Iterable[Span], events: Iterable[Event], world_size: int) -> list[RankTime]:
    """Seconds per rank in compute / sync / data / idle over the run's wall time.

    Idle causes: ``sync_wait`` (the idle span ends where a sync of that rank begins: it waited
    for slower ranks at an averaging), ``epoch_boundary`` (an epoch start or end falls inside
    it), ``other``; time covered by no span at all is ``untracked``.
    """
    spans = [s for s in spans if s[3] >= s[2]]
    epoch_marks = [t for kind, t in events if kind in ("epoch_start", "epoch_end")]
    # The run's span: from the first recorded activity (process start-up before it is not
    # training time) to the last.
    wall = max((s[3] for s in spans), default=0.0) - min((s[2] for s in spans), default=0.0)
    out = [RankTime(rank=r, wall_s=wall) for r in range(world_size)]
    sync_starts: dict[int, list[float]] = {r: [] for r in range(world_size)}
    for rank, kind, start, _ in spans:
        if kind == "sync" and rank in sync_starts:
            sync_starts[rank].append(start)
    for rank, kind, start, end in spans:
        if not 0 <= rank < world_size:
            continue
        rt = out[rank]
        d = end - start
        if kind == "compute":
            rt.compute_s += d
        elif kind == "sync":
            rt.sync_s += d
        elif kind == "data":
            rt.data_s += d
        elif kind == "idle":
            rt.idle_s += d
            cause = _idle_cause(start, end, sync_starts[rank], epoch_marks)
            rt.idle_causes[cause] = rt.idle_causes.get(cause, 0.0) + d
    for rt in out:
        untracked = rt.wall_s - (rt.compute_s + rt.sync_s + rt.data_s + rt.idle_s)
        if untracked > NEAR_S:
            rt.idle_causes["untracked"] = untracked
            rt.idle_s += untracked
    return out


def _idle_cause(
    start: float, end: float, sync_starts: list[float], epoch_marks: list[float]
) -> str:
    """Why a rank sat idle over ``[start, end]``: see :func:`rank_times` for the causes."""
    if any(abs(s - end) <= NEAR_S for s in sync_starts):
        return "sync_wait"
    if any(start - NEAR_S <= t <= end + NEAR_S for t in epoch_marks):
        return "epoch_boundary"
    return "other"
