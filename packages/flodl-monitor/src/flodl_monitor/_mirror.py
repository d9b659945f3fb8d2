"""The server process's copy of what the dashboard shows, fed from the training process.

:class:`MirrorTree` is a :class:`~flodl_monitor.RecordTree` rebuilt from a snapshot and then kept
current record by record, so ``/node``, ``/history`` and ``/stream`` rollups are computed here and
not in the training process. :class:`MirrorSource` is the :class:`DashboardSource` the routes read
in this process: epochs and the tree are pushed to it, while the page and the graph SVG (which
change through setters the training process does not announce) are asked for on each request.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from ._alerts import Alert
from ._hub import Hub
from ._records import Record, RecordTree

ASK_TIMEOUT = 10.0


def alert_of(obj: Mapping[str, Any]) -> Alert:
    """An :class:`Alert` back from its ``to_json`` form."""
    return Alert(obj["kind"], obj["path"], obj["message"], obj.get("step"), obj["t"])


class MirrorTree(RecordTree):
    """A copy of another process's record tree that never raises alerts of its own.

    Records arrive at most twice (around the snapshot) and are kept once; alerts were already
    de-duplicated by the source tree, so each one that arrives is recorded, and marks its leaf
    lost when the source's stale check did.
    """

    def __init__(self, *, rollup: Mapping[str, str], history: int, alerts: int) -> None:
        super().__init__(rollup=rollup, history=history, alerts=alerts, stale_after=None)
        self._last_step: dict[str, int] = {}

    def add(self, rec: Mapping[str, Any]) -> None:
        """Publish one record (``Record.to_json`` form) unless its step is already here."""
        path, step = rec["path"], rec["step"]
        if step <= self._last_step.get(path, -1):
            return
        self._last_step[path] = step
        self.publish(path, rec["metrics"], step=step, t=rec["t"])

    def apply_alert(self, alert: Alert, *, lost: bool = False) -> None:
        """Record ``alert``; ``lost``: the source tree counts its leaf lost from now on."""
        with self._lock:
            # The source already decided this alert is new (a rank that left twice alerts twice).
            self._alert_keys.discard(alert.key)
            if lost:
                self._lost.add(alert.path)
        self.alert(alert)

    def load(self, snap: Mapping[str, Any]) -> None:
        """Rebuild from :func:`flodl_monitor._remote.tree_snapshot` (records, alerts, lost)."""
        for rec in snap["records"]:
            self.add(rec)
        for obj in snap["alerts"]:
            self.apply_alert(alert_of(obj))
        with self._lock:
            self._lost.update(p for p in snap["lost"] if p in self)


class MirrorSource:
    """What the routes read in the server process (see the module docstring).

    ``ask(what)`` sends a question to the training process and returns its id; the answer comes
    back through :meth:`answer`.
    """

    def __init__(self, tree: MirrorTree, ask: Callable[[int, str], None]) -> None:
        self.records = tree
        self.hub: Hub | None = None
        self._epochs: list[dict[str, Any]] = []
        self._ask = ask
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[str | None]] = {}
        tree.add_listener(self._on_tree)

    def _on_tree(self, kind: str, item: Any) -> None:
        # Records are published on the loop (by the message pump), so the hub is touched
        # from its own thread.
        if kind == "record" and self.hub is not None and isinstance(item, Record):
            self.hub.record(item.path, item.step)

    # ---- DashboardSource --------------------------------------------------------------------

    def page(self) -> Awaitable[str | None]:
        return self._question("page")

    def graph_svg(self) -> Awaitable[str | None]:
        return self._question("svg")

    def epochs(self) -> list[dict[str, Any]]:
        return list(self._epochs)

    def attach(self, hub: Hub) -> None:
        self.hub = hub

    def detach(self, hub: Hub) -> None:
        self.hub = None

    # ---- fed by the pump --------------------------------------------------------------------

    def seed_epochs(self, epochs: list[dict[str, Any]]) -> None:
        self._epochs = epochs

    def add_epoch(self, payload: bytes) -> None:
        self._epochs.append(json.loads(payload))

    async def _question(self, what: str) -> str | None:
        self._next_id += 1
        qid = self._next_id
        fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending[qid] = fut
        try:
            self._ask(qid, what)
            return await asyncio.wait_for(fut, ASK_TIMEOUT)
        except asyncio.TimeoutError:
            raise web.HTTPServiceUnavailable(
                text=f"the training process did not answer within {ASK_TIMEOUT:g} s; retry"
            ) from None
        finally:
            self._pending.pop(qid, None)

    def answer(self, reply: Mapping[str, Any]) -> None:
        fut = self._pending.get(reply["id"])
        if fut is None or fut.done():
            return  # timed out already
        if reply.get("error"):
            fut.set_exception(web.HTTPInternalServerError(text=reply["error"]))
        else:
            fut.set_result(reply["body"])

    def fail_pending(self, why: str) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(web.HTTPServiceUnavailable(text=why))
