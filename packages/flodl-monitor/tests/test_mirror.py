"""The server process's copy of the dashboard data, fed through the same messages as over the pipe
(no process here: the messages are applied in order, as the server's pump applies them)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
from typing import Any

from flodl_monitor import Alert, Monitor, RecordTree
from flodl_monitor import _wire as wire
from flodl_monitor._child import _apply
from flodl_monitor._hub import Hub
from flodl_monitor._mirror import MirrorSource, MirrorTree
from flodl_monitor._remote import Channel, RemoteHub, tree_config, tree_snapshot


class _Recorder:
    """A Channel stand-in that keeps (kind, payload) in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes]] = []
        self.held: list[tuple[bytes, bytes]] | None = None

    def put(self, kind: bytes, payload: bytes = b"") -> None:
        (self.held if self.held is not None else self.sent).append((kind, payload))

    def hold(self) -> None:
        self.held = []

    def release(self, kind: bytes, payload: bytes) -> None:
        self.sent += [(kind, payload), *(self.held or [])]
        self.held = None


def _server_copy(tree: RecordTree) -> tuple[MirrorSource, Hub, asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    source = MirrorSource(MirrorTree(**tree_config(tree)), lambda qid, what: None)
    hub = Hub(loop)
    source.attach(hub)
    return source, hub, loop


def _attach(m: Monitor) -> tuple[_Recorder, RemoteHub]:
    """What DashboardServer.start does, with a recorder for the pipe."""
    chan = _Recorder()
    hub = RemoteHub(chan, m.records)  # type: ignore[arg-type]
    chan.hold()
    m.records.add_listener(hub.on_tree)
    m.attach(hub)  # type: ignore[arg-type]
    chan.release(wire.SEED_TREE, json.dumps(tree_snapshot(m.records)).encode())
    return chan, hub


def _same_answers(a: RecordTree, b: RecordTree) -> None:
    assert a.paths() == b.paths()
    for p in a.paths():
        assert a.node(p, alerts=100) == b.node(p, alerts=100), p
        assert a.history(p) == b.history(p), p


def test_a_snapshot_then_live_messages_answer_like_the_source_tree() -> None:
    m = Monitor(100, stream=io.StringIO(), resources=False, record_path=None)
    tree = m.records
    tree.stale_after = 5.0
    t0 = time.time() - 100
    for step in range(4):
        for r in range(4):
            metrics = {"loss": 1.0 / (step + 1) + r, "throughput": 10.0, "acc": float("nan")}
            tree.publish(f"root/host-{r % 2}/rank{r}", metrics, step=step, t=t0 + step)
    tree.check_stale(now=t0 + 50)  # every rank silent for 46 s: four rank_lost alerts
    tree.alert(Alert("nan_loss", "root/host-0/rank0", "loss is NaN", 3, t0 + 4))
    chan, _ = _attach(m)
    # Live, after the snapshot: rank0 comes back (no longer lost), then goes quiet again and
    # alerts a second time (the same key twice: the copy must keep both).
    tree.publish("root/host-0/rank0", {"loss": 0.1, "throughput": 12.0}, step=4, t=t0 + 60)
    tree.check_stale(now=t0 + 70)
    tree.publish("root/host-1/rank3", {"loss": 0.2}, step=9, t=t0 + 71)
    tree.alert(Alert("rank_lost", "root/host-1/rank3", "by hand"))  # not lost: it just reported

    source, hub, loop = _server_copy(tree)
    try:
        for kind, payload in chan.sent:
            _apply(kind, payload, source)
        _same_answers(tree, source.records)
        lost = {c["path"]: c["lost"] for c in source.records.node("root/host-0")["children"]}
        assert lost == {"root/host-0/rank0": True, "root/host-0/rank2": True}
        kinds = [json.loads(f.split(b"data: ")[1])["kind"] for f in hub.alert_frames]
        assert kinds.count("rank_lost") == 6 and "nan_loss" in kinds
        assert not source.records.node("root/host-1")["children"][1]["lost"]
    finally:
        loop.close()


def test_records_sent_twice_around_the_snapshot_are_kept_once() -> None:
    tree = RecordTree()
    mirror = MirrorTree(**tree_config(tree))
    rec = {"path": "root/a", "step": 0, "t": 1.0, "metrics": {"loss": 1.0}}
    mirror.add(rec)
    mirror.add(rec)
    mirror.add({**rec, "step": 1, "metrics": {"loss": 0.5}})
    assert [r["step"] for r in mirror.history("root/a")] == [0, 1]
    assert mirror.check_stale(now=time.time() + 1e6) == []  # the copy never raises alerts


def test_epochs_identity_and_complete_reach_the_copy_in_order() -> None:
    m = Monitor(5, stream=io.StringIO(), resources=False)
    m.log(0, 0.1, {"loss": 2.0})
    m.set_identity("net", "abc")
    chan, _ = _attach(m)
    m.log(1, 0.1, {"loss": float("nan")})  # a NaN loss: an alert, and null in the JSON
    m.set_identity("net2", "def")
    m.finish()
    source, hub, loop = _server_copy(m.records)
    try:
        for kind, payload in chan.sent:
            _apply(kind, payload, source)
        assert source.epochs() == m.epochs()
        assert [json.loads(f.split(b"data: ")[1])["epoch"] for f in hub.frames] == [1, 2]
        assert hub.identity is not None and b'"label":"net2"' in hub.identity
        assert hub.complete is not None and b'"epochs":2' in hub.complete
        assert len(hub.alert_frames) == 1 and b"nan_loss" in hub.alert_frames[0]
        _same_answers(m.records, source.records)
    finally:
        loop.close()
    # Seeding comes first: the tree, then what Monitor.attach sent, then live events.
    kinds = [k for k, _ in chan.sent]
    assert kinds[:3] == [wire.SEED_TREE, wire.SEED_EPOCHS, wire.SEED_ALERTS]
    assert wire.SEED_IDENTITY in kinds[:4] and wire.EPOCH in kinds[4:]


def _read_messages(fd: int) -> list[tuple[bytes, bytes]]:
    data = b""
    while chunk := os.read(fd, 65536):
        data += chunk
    out = []
    while data:
        kind, size = wire.HEADER.unpack(data[: wire.HEADER.size])
        start = wire.HEADER.size
        out.append((kind, data[start : start + size]))
        data = data[start + size :]
    return out


def test_channel_keeps_the_order_and_sends_the_snapshot_before_held_messages() -> None:
    r, w = os.pipe()
    chan = Channel(w)
    chan.put(wire.EPOCH, b"1")
    chan.hold()
    chan.put(wire.EPOCH, b"2")
    chan.release(wire.SEED_TREE, b"{}")
    chan.put(wire.EPOCH, b"3")
    chan.close(timeout=5)
    got = _read_messages(r)
    os.close(r)
    assert got == [(wire.EPOCH, b"1"), (wire.SEED_TREE, b"{}"), (wire.EPOCH, b"2"),
                   (wire.EPOCH, b"3")]  # fmt: skip


def test_channel_survives_a_server_that_went_away() -> None:
    r, w = os.pipe()
    os.close(r)  # nobody reads: writes fail with a broken pipe
    chan = Channel(w)
    for _ in range(3):
        chan.put(wire.EPOCH, b"x" * 100_000)
    chan.close(timeout=5)
    assert chan.broken
    chan.put(wire.EPOCH, b"after")  # still no error for the caller


def test_answers_to_questions(tmp_path: Any) -> None:
    from flodl_monitor._remote import answer_questions

    class Source:
        records = RecordTree()

        def page(self) -> str:
            return "<html>"

        def graph_svg(self) -> str | None:
            raise RuntimeError("boom")

    chan = _Recorder()
    lines = [b'{"id": 1, "get": "page"}\n', b"not json\n", b'{"id": 2, "get": "svg"}\n']
    answer_questions(lines, Source(), chan)  # type: ignore[arg-type]
    replies = [json.loads(p) for _, p in chan.sent]
    assert replies[0] == {"id": 1, "body": "<html>", "error": None}
    assert replies[1]["id"] == 2 and "RuntimeError: boom" in replies[1]["error"]
