"""Timeline: summary numbers, merge, round trips and the three exports."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from flodl_core import CheckpointError, ConfigError
from flodl_monitor import Timeline, TimelineSpan


def scripted() -> Timeline:
    tl = Timeline(origin=1000.0)
    # rank 0: compute 0-2, sync 2-2.5, compute 2.5-4.5, sync 4.5-5
    for kind, a, b in [
        ("compute", 0, 2),
        ("sync", 2, 2.5),
        ("compute", 2.5, 4.5),
        ("sync", 4.5, 5),
    ]:
        tl.span(0, kind, a, b)
    # rank 1: data 0-0.5, compute 0.5-2, sync 2-2.5, compute 2.5-4, idle 4-4.5, sync 4.5-5
    for kind, a, b in [
        ("data", 0, 0.5),
        ("compute", 0.5, 2),
        ("sync", 2, 2.5),
        ("compute", 2.5, 4),
        ("idle", 4, 4.5),
        ("sync", 4.5, 5),
    ]:
        tl.span(1, kind, a, b)
    tl.event("epoch_start", 0.0, epoch=0)
    tl.event("sync", 2.5, duration_ms=500.0)
    tl.event("anchor_changed", 2.5, old=10, new=20)
    tl.event("throttle", 3.0, rank=0)
    tl.event("sync", 5.0, sync_ms=480.0)  # either name is read
    tl.event("epoch_end", 5.0, epoch=0, loss=0.5)
    return tl


def test_summary_numbers() -> None:
    s = scripted().summary()
    assert s["total_s"] == 5.0
    r0, r1 = s["ranks"][0], s["ranks"][1]
    # rank 0: compute 2 + 2 = 4 s, sync 0.5 + 0.5 = 1 s, busy 5 of 5 s
    assert (r0["compute_s"], r0["sync_s"], r0["idle_s"], r0["data_s"]) == (4.0, 1.0, 0.0, 0.0)
    assert (r0["busy_pct"], r0["idle_pct"]) == (100.0, 0.0)
    # rank 1: data 0.5, compute 1.5 + 1.5 = 3, sync 1, idle 0.5; busy 4.5 of 5 → 90 %
    assert (r1["compute_s"], r1["sync_s"], r1["idle_s"], r1["data_s"]) == (3.0, 1.0, 0.5, 0.5)
    assert r1["busy_s"] == 4.5
    assert r1["busy_pct"] == pytest.approx(90.0) and r1["idle_pct"] == pytest.approx(10.0)
    # sync events: 2, (500 + 480)/2 = 490 ms
    assert (s["sync_count"], s["sync_avg_ms"]) == (2, 490.0)
    assert (s["anchor_changes"], s["throttles"], s["epochs"]) == (1, 1, 1)
    assert (s["span_count"], s["event_count"]) == (10, 6)
    assert s["event_counts"] == {
        "anchor_changed": 1,
        "epoch_end": 1,
        "epoch_start": 1,
        "sync": 2,
        "throttle": 1,
    }


def test_sync_from_spans_overlaps_and_gaps() -> None:
    tl = Timeline(origin=0.0)
    tl.span(0, "sync", 1.0, 1.5)
    tl.span(0, "sync", 3.0, 3.1)
    tl.span(1, "sync", 1.0, 1.3)
    s = tl.summary()
    # no sync events: count = most sync spans on one rank (2); mean of 500, 100, 300 ms = 300
    assert s["sync_count"] == 2 and s["sync_avg_ms"] == pytest.approx(300.0)
    tl = Timeline(origin=0.0)
    tl.span(2, "compute", 0.0, 2.0)
    tl.span(2, "compute", 1.0, 3.0)  # overlaps: the union is 0-3
    tl.span(3, "compute", 1.0, 2.0)  # 1 s of 3: the gaps are idle
    s = tl.summary()
    assert s["ranks"][2]["busy_s"] == 3.0 and s["ranks"][2]["compute_s"] == 4.0
    assert s["ranks"][3]["busy_pct"] == pytest.approx(100 / 3)
    assert s["ranks"][3]["idle_pct"] == pytest.approx(200 / 3)
    empty = Timeline().summary()
    assert empty["total_s"] == 0.0 and empty["ranks"] == {} and empty["sync_count"] == 0


def test_merge_shifts_by_origin() -> None:
    a = Timeline(origin=100.0)
    a.span(0, "compute", 0.0, 1.0)
    b = Timeline(origin=101.5)  # started 1.5 s later
    b.span(1, "compute", 0.0, 1.0)
    b.event("sync", 1.0, duration_ms=3.0)
    assert a.merge(b) is a
    assert a.spans == [TimelineSpan(0, "compute", 0.0, 1.0), TimelineSpan(1, "compute", 1.5, 2.5)]
    assert a.events[0].t == 2.5 and a.ranks == [0, 1]
    with pytest.raises(ConfigError, match="merge needs a Timeline"):
        a.merge({})  # type: ignore[arg-type]


def test_dict_round_trip() -> None:
    tl = scripted()
    d = json.loads(json.dumps(tl.to_dict()))
    back = Timeline.from_dict(d)
    assert back.to_dict() == tl.to_dict()
    assert back.summary() == tl.summary()
    assert d["spans"][0] == [0, "compute", 0.0, 2.0]
    assert d["events"][0] == {"kind": "epoch_start", "t": 0.0, "fields": {"epoch": 0}}


def test_from_dict_errors() -> None:
    d = scripted().to_dict()
    with pytest.raises(CheckpointError, match="version 9"):
        Timeline.from_dict({**d, "version": 9})
    with pytest.raises(CheckpointError, match="not a timeline dict"):
        Timeline.from_dict({"version": 1, "origin": 0.0, "spans": []})
    with pytest.raises(CheckpointError, match="span kind must be one of"):
        Timeline.from_dict({**d, "spans": [[0, "nap", 0.0, 1.0]]})


def test_save_json(tmp_path: Path) -> None:
    path = scripted().save_json(tmp_path / "out" / "tl.json")
    doc = json.loads(path.read_text())
    assert doc["summary"]["sync_count"] == 2
    assert doc["summary"]["ranks"]["1"]["busy_s"] == 4.5
    assert Timeline.from_dict(doc).to_dict() == scripted().to_dict()
    assert [p.name for p in path.parent.iterdir()] == ["tl.json"]  # no temp file left


def test_save_csv(tmp_path: Path) -> None:
    path = scripted().save_csv(tmp_path / "tl.csv")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 16  # 10 spans + 6 events
    first = rows[0]
    assert (first["record"], first["rank"], first["kind"]) == ("span", "0", "compute")
    assert (first["start_s"], first["end_s"], first["duration_ms"]) == (
        "0.000000",
        "2.000000",
        "2000.000",
    )
    throttle = next(r for r in rows if r["kind"] == "throttle")
    assert throttle["record"] == "event" and throttle["rank"] == "0"
    assert json.loads(throttle["fields"]) == {"rank": 0}
    sync = next(r for r in rows if r["record"] == "event" and r["kind"] == "sync")
    assert sync["duration_ms"] == "500.0"


def test_save_html(tmp_path: Path) -> None:
    path = scripted().save_html(tmp_path / "tl.html", title="run <a&b>")
    page = path.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert "run &lt;a&amp;b&gt;" in page and "run <a&b>" not in page
    assert "<svg" in page and ">rank 0</text>" in page and ">rank 1</text>" in page
    # one coloured rect per span, by kind
    assert len(re.findall(r'<rect class="compute"', page)) == 4
    assert len(re.findall(r'<rect class="sync"', page)) == 4
    assert len(re.findall(r'<rect class="idle"', page)) == 1
    assert len(re.findall(r'<rect class="data"', page)) == 1
    # markers for epoch_start, epoch_end, anchor_changed, throttle
    assert len(re.findall(r'<line class="event ', page)) == 4
    # self-contained: nothing fetched, no executable script
    assert "http://" not in page and "https://" not in page and "src=" not in page
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts == ['<script type="application/json" id="timeline-data">']
    blob = re.search(r'id="timeline-data">(.*?)</script>', page, re.S)
    assert blob is not None
    assert Timeline.from_dict(json.loads(blob.group(1))).to_dict() == scripted().to_dict()
    assert (path.stat().st_mode & 0o777) == 0o644


def test_save_html_names_a_title_that_is_no_str(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="save_html: title must be a str, got NoneType"):
        scripted().save_html(tmp_path / "tl.html", title=None)  # type: ignore[arg-type]
    assert not (tmp_path / "tl.html").exists()


def test_save_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "tl.json"
    path.write_text("old")
    Timeline(origin=0.0).save_json(path)
    assert json.loads(path.read_text())["spans"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tl.json"]


def test_recording_errors() -> None:
    tl = Timeline(origin=0.0)
    with pytest.raises(ConfigError, match="span kind must be one of compute, sync, idle, data"):
        tl.span(0, "nap", 0.0, 1.0)
    with pytest.raises(ConfigError, match="rank must be an int >= 0"):
        tl.span(-1, "compute", 0.0, 1.0)
    with pytest.raises(ConfigError, match="start_s must be a finite number of seconds"):
        tl.span(0, "compute", -1.0, 1.0)
    with pytest.raises(ConfigError, match="span ends before it starts"):
        tl.span(0, "compute", 2.0, 1.0)
    with pytest.raises(ConfigError, match="event kind must be a non-empty str"):
        tl.event("", 1.0)
    with pytest.raises(ConfigError, match="event field x is a list"):
        tl.event("custom", 1.0, x=[1, 2])
    with pytest.raises(ConfigError, match="not finite"):
        tl.event("custom", 1.0, loss=float("nan"))
    assert tl.spans == [] and tl.events == []


def test_now_counts_from_origin() -> None:
    import time

    tl = Timeline()
    assert 0.0 <= tl.now() < 5.0
    assert Timeline(origin=time.time() - 10).now() >= 10.0


# ---- utilization samples ------------------------------------------------------------------------


def sampled() -> Timeline:
    """:func:`scripted` plus utilization: rank 0 every second (CPU only), rank 1 twice with a
    GPU reading."""
    tl = scripted()
    for t, cpu in [(1.0, 90.0), (2.0, 50.0), (3.0, 100.0), (5.0, 20.0)]:
        tl.sample(0, t, cpu=cpu)
    tl.sample(1, 2.0, cpu=180.0, gpu=70.0)
    tl.sample(1, 4.0, gpu=30.0)
    return tl


def test_samples_summary_is_time_weighted() -> None:
    s = sampled().summary()
    u0, u1 = s["utilization"][0], s["utilization"][1]
    # rank 0: gaps 1, 1, 2; the first sample weighs as the second's gap (1):
    # (90 + 50 + 100 + 2 * 20) / 5 = 56
    assert u0["samples"] == 4 and u0["cpu_avg_pct"] == pytest.approx(56.0)
    assert u0["cpu_max_pct"] == 100.0 and u0["gpu_avg_pct"] is None and u0["gpu_max_pct"] is None
    # rank 1: one CPU reading; GPU (70 + 30) / 2 with equal weights
    assert (u1["cpu_avg_pct"], u1["cpu_max_pct"]) == (180.0, 180.0)
    assert u1["gpu_avg_pct"] == pytest.approx(50.0) and u1["gpu_max_pct"] == 70.0
    assert s["sample_count"] == 6
    assert scripted().summary()["utilization"] == {}


def test_sample_only_rank_and_total() -> None:
    tl = Timeline(origin=0.0)
    tl.sample(3, 7.5, cpu=12.0)
    assert tl.ranks == [3] and tl.total_s == 7.5
    assert tl.summary()["utilization"][3]["cpu_avg_pct"] == 12.0


def test_sample_errors() -> None:
    tl = Timeline(origin=0.0)
    with pytest.raises(ConfigError, match="needs cpu=, gpu= or both"):
        tl.sample(0, 1.0)
    with pytest.raises(ConfigError, match="cpu must be a finite percentage"):
        tl.sample(0, 1.0, cpu=-1.0)
    with pytest.raises(ConfigError, match="gpu must be a finite percentage"):
        tl.sample(0, 1.0, gpu=float("nan"))
    with pytest.raises(ConfigError, match="percentage of one device"):
        tl.sample(0, 1.0, gpu=101.0)
    with pytest.raises(ConfigError, match="rank must be an int >= 0"):
        tl.sample(-1, 1.0, cpu=1.0)
    with pytest.raises(ConfigError, match="t must be a finite number of seconds"):
        tl.sample(0, -2.0, cpu=1.0)
    assert tl.samples == []


def test_samples_merge_and_round_trip() -> None:
    a = Timeline(origin=100.0)
    a.sample(0, 1.0, cpu=40.0)
    b = Timeline(origin=102.0)
    b.sample(1, 0.5, cpu=99.0, gpu=10.0)
    a.merge(b)
    assert [(u.rank, u.t, u.cpu_pct, u.gpu_pct) for u in a.samples] == [
        (0, 1.0, 40.0, None),
        (1, 2.5, 99.0, 10.0),
    ]
    d = json.loads(json.dumps(sampled().to_dict()))
    assert d["version"] == 2 and [1, 2.0, 180.0, 70.0] in d["samples"]
    back = Timeline.from_dict(d)
    assert back.to_dict() == sampled().to_dict() and back.summary() == sampled().summary()
    # a version 1 dict (before samples) still loads, with none
    old = {k: v for k, v in scripted().to_dict().items() if k != "samples"}
    assert Timeline.from_dict({**old, "version": 1}).samples == []
    with pytest.raises(CheckpointError, match="not a timeline dict"):
        Timeline.from_dict({**d, "samples": [[0, 1.0, "high", None]]})


def test_samples_in_json_csv_and_html(tmp_path: Path) -> None:
    tl = sampled()
    doc = json.loads(tl.save_json(tmp_path / "tl.json").read_text())
    assert doc["summary"]["utilization"]["0"]["cpu_avg_pct"] == pytest.approx(56.0)
    with tl.save_csv(tmp_path / "tl.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["record"] == "sample"]
    assert len(rows) == 6 and rows[-1]["rank"] == "1" and rows[-1]["kind"] == "utilization"
    assert json.loads(rows[-1]["fields"]) == {"cpu_pct": None, "gpu_pct": 30.0}
    page = tl.save_html(tmp_path / "tl.html").read_text()
    assert ">util 0</text>" in page and ">util 1</text>" in page
    assert len(re.findall(r'<polyline class="util cpu"', page)) == 2
    assert len(re.findall(r'<polyline class="util gpu"', page)) == 1  # rank 0 has no GPU
    assert "<td>56 %</td>" in page  # rank 0's CPU average in the table
    plain = scripted().save_html(tmp_path / "plain.html").read_text()
    assert "<polyline" not in plain and "util 0" not in plain


# ---- Chrome trace -------------------------------------------------------------------------------


def test_chrome_trace_is_valid_trace_event_json(tmp_path: Path) -> None:
    tl = sampled()
    path = tl.save_chrome_trace(tmp_path / "trace.json")
    doc = json.loads(path.read_text())
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"}
    assert doc["otherData"]["origin_unix_s"] == 1000.0
    events = doc["traceEvents"]
    for ev in events:
        assert {"name", "ph", "pid", "tid"} <= set(ev), ev
        assert ev["ph"] in ("M", "X", "i", "C")
        assert ev["ph"] == "M" or ev["ts"] >= 0
    # one process (and one thread) per rank, named, pid = tid = rank + 1
    names = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert names == {1: "rank 0", 2: "rank 1"}
    assert {(ev["pid"], ev["tid"]) for ev in events} == {(1, 1), (2, 2)}
    # spans are complete events in microseconds
    slices = [ev for ev in events if ev["ph"] == "X"]
    assert len(slices) == 10
    data = next(ev for ev in slices if ev["name"] == "data")
    assert (data["pid"], data["ts"], data["dur"], data["cat"]) == (2, 0.0, 500000.0, "data")
    # events: the throttle carries rank 0 and sits on its thread; the others are global
    instants = [ev for ev in events if ev["ph"] == "i"]
    assert len(instants) == 6
    throttle = next(ev for ev in instants if ev["name"] == "throttle")
    assert (throttle["s"], throttle["pid"], throttle["ts"]) == ("t", 1, 3000000.0)
    assert {ev["s"] for ev in instants if ev["name"] != "throttle"} == {"g"}
    anchor = next(ev for ev in instants if ev["name"] == "anchor_changed")
    assert anchor["args"] == {"old": 10, "new": 20}
    # utilization: counter tracks CPU and GPU per rank
    counters = [(ev["pid"], ev["name"], ev["ts"], ev["args"]) for ev in events if ev["ph"] == "C"]
    assert (1, "CPU", 1000000.0, {"%": 90.0}) in counters
    assert (2, "GPU", 4000000.0, {"%": 30.0}) in counters
    assert not any(pid == 1 and name == "GPU" for pid, name, _, _ in counters)
    assert len(counters) == 4 + 1 + 2
    # timed events in time order, metadata first
    timed = [ev["ts"] for ev in events if ev["ph"] != "M"]
    assert timed == sorted(timed) and all(ev["ph"] == "M" for ev in events[:6])


def test_chrome_trace_of_empty_timeline() -> None:
    doc = Timeline(origin=5.0).to_chrome_trace()
    assert doc["traceEvents"] == [] and json.loads(json.dumps(doc)) == doc


@pytest.mark.parametrize("origin", ["abc", float("nan"), True])
def test_origin_must_be_a_finite_time(origin: object) -> None:
    with pytest.raises(ConfigError, match="origin must be a finite time"):
        Timeline(origin=origin)  # type: ignore[arg-type]
