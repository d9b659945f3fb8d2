"""RankLedger's timeline times: one clock for every span, event and sample of a rank."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from flodl_ddp import _ledger
from flodl_ddp._ledger import RankLedger
from flodl_monitor import Timeline


def test_a_wall_clock_stepping_back_never_reverses_a_span(monkeypatch: pytest.MonkeyPatch) -> None:
    # the wall clock steps back 1 ms on every read; the engine's clock moves forward
    wall = itertools.count(start=1000.0, step=-0.001)
    monkeypatch.setattr(_ledger.time, "time", lambda: next(wall))
    tl = Timeline(origin=999.0)
    led = RankLedger(0, tl, t0=999.0)
    t = _ledger.now()
    for i in range(5):
        led.span("compute", t + i * 1e-4, t + (i + 1) * 1e-4)
    s, *rest = tl.spans
    assert len(rest) == 4
    starts_ends = [(sp.start_s, sp.end_s) for sp in tl.spans]
    assert all(a < b for a, b in starts_ends)
    assert all(b1 <= a2 for (_, b1), (a2, _) in itertools.pairwise(starts_ends))
    # a 0.1 ms span stays 0.1 ms: the readings' gaps carry over to the timeline
    assert s.end_s - s.start_s == pytest.approx(1e-4, abs=1e-9)


def test_events_and_spans_share_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, Any]] = []

    class Spy(Timeline):
        def event(self, kind: str, t: float, **fields: Any) -> None:
            seen.append((kind, t))

    tl = Spy(origin=0.0)
    led = RankLedger(0, tl, t0=tl.origin)
    before = _ledger.now()
    led.event("guard", verdict="stable", bad=float("nan"))
    led.span("idle", before, _ledger.now())
    ((kind, t),) = seen
    span = tl.spans[0]
    assert kind == "guard"
    assert span.start_s <= t <= span.end_s


def test_a_ledger_without_a_timeline_records_nothing() -> None:
    led = RankLedger(1, None, 0.0)
    led.span("compute", 0.0, 1.0)
    led.event("guard")
    led.mark(epoch_start=0)
    assert led.take({}, {})["batches"] == 0.0
