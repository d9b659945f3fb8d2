"""The training process's side of the served dashboard: encode each event once, queue the bytes.

The dashboard's HTTP server and its SSE fan-out run in a separate process (``_child``), so that
writing to 50 browsers never takes the training process's interpreter lock. Here, a
:class:`RemoteHub` stands in for the server's :class:`~flodl_monitor._hub.Hub`: the Monitor calls
it exactly as it would call a hub, each call JSON-encodes its event once and hands the bytes to a
:class:`Channel`, whose own thread writes them to the server's stdin. A server that stops reading
costs queued memory here, never training time.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import threading
from collections.abc import Iterable
from typing import Any, Protocol

from flodl_core import FlodlError

from . import _wire as wire
from ._hub import sse_payload
from ._paths import ROOT
from ._records import Record, RecordTree


class Source(Protocol):
    """What the training side reads (the :class:`~flodl_monitor.Monitor`)."""

    records: RecordTree

    def page(self) -> str: ...
    def graph_svg(self) -> str | None: ...
    def attach(self, hub: Any) -> None: ...
    def detach(self, hub: Any) -> None: ...


class Channel:
    """Framed messages to the server process, in order, without ever blocking the caller.

    A message is written at once when the pipe has room: a non-blocking write of a few hundred
    bytes costs microseconds and wakes no other thread. When the pipe is full, or earlier bytes
    still wait, it joins a backlog that a daemon thread writes as the server reads, so a server
    that falls behind costs memory here, never training time. Between :meth:`hold` and
    :meth:`release` messages are kept aside, so that a snapshot taken meanwhile can be sent
    before them (nothing published during the snapshot is lost).
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        # Direct writes need a non-blocking pipe and select() on it to wait for room: POSIX.
        self._direct = os.name == "posix"
        if self._direct:
            os.set_blocking(fd, False)
        self._cond = threading.Condition(threading.Lock())
        self._backlog: list[bytes] = []
        self._busy = False  # the thread holds bytes it has not written yet
        self._closing = False
        self._held: list[bytes] | None = None
        self.broken = False  # the server process is gone: messages are dropped
        self._thread = threading.Thread(target=self._run, name="flodl-dashboard-feed", daemon=True)
        self._thread.start()

    def put(self, kind: bytes, payload: bytes = b"") -> None:
        msg = wire.message(kind, payload)
        with self._cond:
            if self._held is not None:
                self._held.append(msg)
                return
            if self.broken:
                return
            if self._direct and not self._backlog and not self._busy:
                try:
                    sent = os.write(self._fd, msg)
                except BlockingIOError:
                    sent = 0
                except OSError:  # BrokenPipeError: the server exited; training carries on
                    self.broken = True
                    return
                if sent == len(msg):
                    return
                msg = msg[sent:]
            self._backlog.append(msg)
            self._cond.notify()

    def hold(self) -> None:
        with self._cond:
            self._held = []

    def release(self, kind: bytes, payload: bytes) -> None:
        """Send ``(kind, payload)`` first, then everything held since :meth:`hold`."""
        with self._cond:
            self._backlog += [wire.message(kind, payload), *(self._held or ())]
            self._held = None
            self._cond.notify()

    def close(self, timeout: float) -> None:
        """Write what is queued, then close the pipe (the server sees end of input)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._backlog and not self._closing:
                    self._cond.wait()
                if not self._backlog:
                    break  # closing, and everything is written
                data = b"".join(self._backlog)  # one write for whatever piled up
                self._backlog.clear()
                self._busy = True
            if not self.broken:
                self._write(data)
            with self._cond:
                self._busy = False
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                try:
                    view = view[os.write(self._fd, view) :]
                except BlockingIOError:  # the pipe is full: wait until the server reads
                    select.select([], [self._fd], [], 1.0)
        except OSError:  # BrokenPipeError: the server exited; training carries on
            self.broken = True


class RemoteHub:
    """A :class:`~flodl_monitor._hub.Hub` look-alike that forwards every event to the server.

    ``Monitor.attach`` seeds it (``seed``, ``alert_frames``, ``complete``, ``identity``) under the
    Monitor's lock, before any live event; records reach it whole through :meth:`on_tree`.
    """

    def __init__(self, channel: Channel, tree: RecordTree) -> None:
        self._chan = channel
        self._tree = tree
        self._alert_frames: list[bytes] = []
        self._complete: bytes | None = None
        self._identity: bytes | None = None

    # ---- seeding (Monitor.attach) ------------------------------------------------------------

    def seed(self, epochs: list[dict[str, Any]]) -> None:
        self._chan.put(wire.SEED_EPOCHS, sse_payload(epochs))

    @property
    def alert_frames(self) -> list[bytes]:
        return self._alert_frames

    @alert_frames.setter
    def alert_frames(self, frames: list[bytes]) -> None:
        self._alert_frames = frames
        self._chan.put(wire.SEED_ALERTS, sse_payload([f.decode() for f in frames]))

    @property
    def complete(self) -> bytes | None:
        return self._complete

    @complete.setter
    def complete(self, frame: bytes | None) -> None:
        self._complete = frame
        if frame is not None:
            self._chan.put(wire.SEED_COMPLETE, frame)

    @property
    def identity(self) -> bytes | None:
        return self._identity

    @identity.setter
    def identity(self, frame: bytes | None) -> None:
        self._identity = frame
        if frame is not None:
            self._chan.put(wire.SEED_IDENTITY, frame)

    # ---- live events (any thread) -----------------------------------------------------------

    def epoch_threadsafe(self, obj: dict[str, Any]) -> None:
        self._chan.put(wire.EPOCH, sse_payload(obj))

    def alert_threadsafe(self, obj: dict[str, Any]) -> None:
        # Whether the source tree now counts the leaf lost (its stale check does; an alert
        # raised by hand does not), so that the server's copy shows the same.
        lost = obj["kind"] == "rank_lost" and self._is_lost(obj["path"])
        self._chan.put(wire.ALERT, sse_payload({"alert": obj, "lost": lost}))

    def _is_lost(self, path: str) -> bool:
        if "/" not in path:
            return False
        parent, name = path.rsplit("/", 1)
        try:
            found = self._tree.children(parent, [name])
        except FlodlError:  # not a node of the tree
            return False
        return bool(found and found[0]["lost"])

    def identity_threadsafe(self, obj: dict[str, Any]) -> None:
        self._chan.put(wire.IDENTITY, sse_payload(obj))

    def complete_threadsafe(self, obj: dict[str, Any]) -> None:
        self._chan.put(wire.COMPLETE, sse_payload(obj))

    def record_threadsafe(self, path: str, step: int) -> None:
        """Nothing to do: :meth:`on_tree` already sent the whole record."""

    def on_tree(self, kind: str, item: Any) -> None:
        """Record-tree listener: each record goes to the server's copy of the tree."""
        if kind == "record" and isinstance(item, Record):
            rec = {"path": item.path, "step": item.step, "t": item.t, "metrics": item.metrics}
            self._chan.put(wire.RECORD, sse_payload(rec))


def tree_config(tree: RecordTree) -> dict[str, Any]:
    """What the server's copy needs to roll up and cap as ``tree`` does."""
    # RecordTree keeps these private; they are fixed at construction.
    return {
        "rollup": dict(getattr(tree, "_rules", {})),
        "history": int(getattr(tree, "_history", 10_000)),
        "alerts": int(getattr(tree, "_alerts_cap", 100)),
    }


def tree_snapshot(tree: RecordTree) -> dict[str, Any]:
    """Every leaf record, every alert and the lost leaves of ``tree`` (for ``MirrorTree.load``).

    Records are ordered by step, then time, as they were most likely published. Alerts keep the
    root's order (every alert reaches the root); older ones that only deeper nodes still hold
    come first, by time.
    """
    records: list[dict[str, Any]] = []
    alerts: dict[tuple[Any, ...], dict[str, Any]] = {}
    lost: list[str] = []
    cap = tree_config(tree)["alerts"]
    root: list[tuple[Any, ...]] = []
    for path in tree.paths():
        node = tree.node(path, alerts=cap)
        if node["kind"] == "leaf" and node["latest"] is not None:
            records.extend(tree.history(path))
        lost.extend(c["path"] for c in node["children"] if c["lost"])
        for a in node["alerts"]:  # an alert sits on its node and every ancestor: keep it once
            key = (a["kind"], a["path"], a["message"], a["t"])
            alerts[key] = a
            if path == ROOT:
                root.append(key)
    records.sort(key=lambda r: (r["step"], r["t"]))
    in_root = set(root)
    older = sorted((k for k in alerts if k not in in_root), key=lambda k: k[3])
    return {"records": records, "alerts": [alerts[k] for k in older + root], "lost": lost}


def answer_questions(lines: Iterable[bytes], source: Source, channel: Channel) -> None:
    """Answer the server's questions (``{"id", "get": "page" | "svg"}``) until it closes."""
    for line in lines:
        try:
            ask = json.loads(line)
            qid, what = ask["id"], ask["get"]
        except (ValueError, KeyError, TypeError):
            continue  # not a question (a stray line): nothing to answer
        reply: dict[str, Any] = {"id": qid, "body": None, "error": None}
        try:
            reply["body"] = source.page() if what == "page" else source.graph_svg()
        except Exception as e:  # reported to the browser as a 500, training carries on
            reply["error"] = f"rendering the {what} failed: {type(e).__name__}: {e}"
        channel.put(wire.REPLY, sse_payload(reply))
