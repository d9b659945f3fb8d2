"""The dashboard's server process (started by :class:`~flodl_monitor.DashboardServer`).

It runs :func:`~flodl_monitor.make_app` on a copy of the dashboard's data (``_mirror``) that the
training process feeds through this process's stdin (``_wire``), and it exits when that input
ends, when its parent process is gone, or when told to stop: a training process that dies takes
its dashboard with it. Ctrl-C is left to the training process, which decides when to stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from typing import Any, BinaryIO

from . import _wire as wire
from ._hub import frame_of
from ._listen import listen, make_runner
from ._mirror import MirrorSource, MirrorTree, alert_of
from ._server import make_app

PARENT_POLL = 1.0  # seconds between checks that the training process still exists


def _say(out: BinaryIO, obj: dict[str, Any]) -> None:
    out.write(json.dumps(obj).encode() + b"\n")


def _apply(kind: bytes, payload: bytes, source: MirrorSource) -> None:
    """One message from the training process, applied on the loop."""
    hub, tree = source.hub, source.records
    assert hub is not None  # attached by the app's startup, before any message is read
    if kind == wire.RECORD:
        tree.add(json.loads(payload))
    elif kind == wire.EPOCH:
        source.add_epoch(payload)
        hub.send("epoch", frame_of("epoch", payload))
    elif kind in (wire.IDENTITY, wire.COMPLETE):
        event = "identity" if kind == wire.IDENTITY else "complete"
        hub.send(event, frame_of(event, payload))
    elif kind == wire.ALERT:
        msg = json.loads(payload)
        tree.apply_alert(alert_of(msg["alert"]), lost=msg["lost"])
        hub.alert(msg["alert"])
    elif kind == wire.REPLY:
        source.answer(json.loads(payload))
    elif kind == wire.SEED_EPOCHS:
        epochs = json.loads(payload)
        source.seed_epochs(epochs)
        hub.seed(epochs)
    elif kind == wire.SEED_ALERTS:
        hub.alert_frames = [f.encode() for f in json.loads(payload)]
    elif kind == wire.SEED_IDENTITY:
        hub.identity = payload
    elif kind == wire.SEED_COMPLETE:
        hub.complete = payload
    elif kind == wire.SEED_TREE:
        tree.load(json.loads(payload))


async def _pump(reader: asyncio.StreamReader, source: MirrorSource, seeded: asyncio.Event) -> None:
    """Apply messages until STOP or the end of input (the training process went away)."""
    while True:
        try:
            kind, payload = await wire.read_message(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        if kind == wire.STOP:
            return
        if kind == wire.SEEDED:
            seeded.set()
        else:
            _apply(kind, payload, source)


async def _parent_gone(ppid: int) -> None:
    # Belt and braces for the end of input: a process forked from the training process may
    # still hold the pipe open after the training process died.
    while os.getppid() == ppid:
        await asyncio.sleep(PARENT_POLL)


async def _serve(cfg: dict[str, Any], out: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    stdin = os.fdopen(0, "rb", buffering=0)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    tree = MirrorTree(**cfg["tree"])
    source = MirrorSource(tree, lambda qid, what: _say(out, {"id": qid, "get": what}))
    app = make_app(
        source,
        max_clients=cfg["max_clients"],
        queue_size=cfg["queue_size"],
        coalesce=cfg["coalesce"],
        allowed_hosts=cfg.get("allowed_hosts", ()),
        bound_host=cfg["host"],
    )
    runner = await make_runner(app)
    seeded = asyncio.Event()
    pump = asyncio.ensure_future(_pump(reader, source, seeded))
    watch = asyncio.ensure_future(_parent_gone(cfg["ppid"]))
    wait_seeded = asyncio.ensure_future(seeded.wait())
    try:
        await asyncio.wait({pump, watch, wait_seeded}, return_when=asyncio.FIRST_COMPLETED)
        if not seeded.is_set():
            return  # the training process went away before the server was up
        try:
            port = await listen(runner, cfg["host"], cfg["port"])
        except OSError as e:
            _say(out, {"error": str(e) or type(e).__name__})
            return
        _say(out, {"port": port})
        await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pump, watch, wait_seeded):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        source.fail_pending("the dashboard is shutting down")
        await runner.cleanup()


def main() -> None:
    """Entry point: ``sys.argv[1]`` is the JSON configuration from ``DashboardServer``."""
    cfg = json.loads(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The handshake and the questions go to the original stdout; anything printed by accident
    # goes to stderr instead of corrupting them.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    asyncio.run(_serve(cfg, out))
