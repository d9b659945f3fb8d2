"""Server-Sent Events fan-out that never makes training wait.

A :class:`Hub` lives on the server's event loop. Served with :meth:`Monitor.serve
<flodl_monitor.Monitor.serve>`, that loop runs in a separate process and the training process only
encodes each event once and queues the bytes (see ``_remote``); mounted with ``Monitor.app()``,
training threads hand events over with ``loop.call_soon_threadsafe`` (a few microseconds).
Every epoch is JSON-encoded once and the same bytes go to every client.

Each client has a bounded queue: a client that falls behind by more than ``queue_size`` frames
is disconnected instead of buffered without end, and its browser's EventSource reconnects and
replays the whole history (late join), so a slow client costs memory bounded by the queue and
never stalls anyone.

Record-tree streams (``/stream?path=``) are coalesced: a client remembers which steps and which
children changed and sends each at most once per ``coalesce`` seconds, so 300 ranks reporting the
same step produce one rollup frame, not 300.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ._paths import is_within

HEARTBEAT = 15.0


def sse_payload(data: Any) -> bytes:
    """``data`` as compact JSON bytes (no NaN: the browser's ``JSON.parse`` refuses it)."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


def frame_of(event: str, payload: bytes) -> bytes:
    """``event: <name>\\ndata: <json>\\n\\n`` (JSON has no raw newlines, so one data line)."""
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


def sse_frame(event: str, data: Any) -> bytes:
    """One SSE frame of ``data`` (see :func:`frame_of`)."""
    return frame_of(event, sse_payload(data))


class EpochClient:
    """One ``/events`` connection: a bounded queue of ready frames; ``None`` ends it."""

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue(size + 1)  # +1 for the end mark
        self.size = size

    def offer(self, frame: bytes | None) -> bool:
        if frame is not None and self.queue.qsize() >= self.size:
            self.end()
            return False
        self.queue.put_nowait(frame)
        return True

    def end(self) -> None:
        while not self.queue.empty():  # drop what it could not keep up with
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class StreamClient:
    """One ``/stream?path=`` connection: what changed since the last flush."""

    MAX_PENDING = 4096

    def __init__(self, path: str) -> None:
        self.path = path
        self.steps: set[int] = set()
        self.children: set[str] = set()
        self.alerts: list[dict[str, Any]] = []
        self.wake = asyncio.Event()
        self.closed = False

    def mark(self, rec_path: str, step: int) -> None:
        self.steps.add(step)
        if rec_path != self.path:  # below us: the direct child on the way changed too
            self.children.add(rec_path[len(self.path) + 1 :].split("/", 1)[0])
        if len(self.steps) > self.MAX_PENDING or len(self.alerts) > self.MAX_PENDING:
            self.closed = True  # hopelessly behind: let it reconnect and start fresh
        self.wake.set()


class Hub:
    """SSE state on the server loop: epoch frames for replay, and the connected clients."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, *, max_clients: int = 64, queue_size: int = 256
    ) -> None:
        self.loop = loop
        self.max_clients = max_clients
        self.queue_size = queue_size
        self.frames: list[bytes] = []  # every epoch frame, for late joiners
        self.alert_frames: list[bytes] = []
        self.complete: bytes | None = None
        self.identity: bytes | None = None  # the latest model identity, replayed to new pages
        self.epoch_clients: set[EpochClient] = set()
        self.stream_clients: set[StreamClient] = set()
        self.closed = False

    # ---- thread-safe entry points (called from training threads) --------------------------

    def epoch_threadsafe(self, obj: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self._broadcast, "epoch", obj)

    def alert_threadsafe(self, obj: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self.alert, obj)

    def identity_threadsafe(self, obj: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self._broadcast, "identity", obj)

    def complete_threadsafe(self, obj: dict[str, Any]) -> None:
        self.loop.call_soon_threadsafe(self._broadcast, "complete", obj)

    def record_threadsafe(self, path: str, step: int) -> None:
        if self.stream_clients:  # read without the loop: a stale answer only costs a no-op hop
            self.loop.call_soon_threadsafe(self.record, path, step)

    # ---- loop-side --------------------------------------------------------------------------

    def seed(self, epochs: list[dict[str, Any]]) -> None:
        self.frames = [sse_frame("epoch", e) for e in epochs]

    def _broadcast(self, event: str, obj: dict[str, Any]) -> None:
        self.send(event, sse_frame(event, obj))

    def send(self, event: str, frame: bytes) -> None:
        """Keep ``frame`` (an ``epoch``, ``identity`` or ``complete`` frame) for late joiners
        and offer it to every ``/events`` client."""
        if event == "epoch":
            self.frames.append(frame)
        elif event == "identity":
            self.identity = frame
        else:
            self.complete = frame
        for c in list(self.epoch_clients):
            if not c.offer(frame):
                self.epoch_clients.discard(c)

    def alert(self, obj: dict[str, Any]) -> None:
        """Send an alert to every page and to the node streams at or above its path."""
        frame = sse_frame("alert", obj)
        self.alert_frames.append(frame)
        del self.alert_frames[:-200]
        for c in list(self.epoch_clients):
            if not c.offer(frame):
                self.epoch_clients.discard(c)
        for s in self.stream_clients:
            if is_within(obj["path"], s.path):  # alerts reach every ancestor's view
                s.alerts.append(obj)
                s.wake.set()

    def record(self, path: str, step: int) -> None:
        """Mark ``step`` of ``path`` changed for the node streams at or above it."""
        for s in self.stream_clients:
            if is_within(path, s.path):
                s.mark(path, step)

    def client_count(self) -> int:
        return len(self.epoch_clients) + len(self.stream_clients)

    def close_all(self) -> None:
        """End every stream (server shutdown)."""
        self.closed = True
        for c in self.epoch_clients:
            c.end()
        self.epoch_clients.clear()
        for s in self.stream_clients:
            s.closed = True
            s.wake.set()
