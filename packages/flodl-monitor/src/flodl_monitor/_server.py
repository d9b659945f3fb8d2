"""The dashboard's HTTP routes (aiohttp). :class:`DashboardServer` (``_process``) serves them from
a separate process, so that the fan-out to many browsers never competes with training for the
interpreter lock.

Routes (all GET; every error is a JSON body ``{"error": ..., "status": ...}`` with a 4xx code):

- ``/`` the dashboard page, ``/graph.svg`` the model's graph (404 when none)
- ``/events`` SSE of epochs: every past epoch first (late join), then live ones, alerts,
  ``identity`` (model label, hash, parameters: known only once the model is seen) and
  ``complete``; ``/api/history`` the same epochs as one JSON array
- ``/favicon.ico`` 204 (no icon, no 404 in the browser's console)
- ``/paths`` every record path, ``/node?path=`` one node with its children (O(children)),
  ``/history?path=&n=`` its last ``n`` records or rollups, ``/stream?path=&n=`` SSE of that node

Every request's ``Host`` header must name the dashboard (``_hosts``: loopback names, the address
the connection was made to, the bound host, ``allowed_hosts``) on the port it came in on; any
other is refused with 403 before routing, which defeats DNS rebinding.

Served by :class:`DashboardServer`, requests that aiohttp's HTTP parser refuses (a request line
over 8190 bytes: 414; a header over 16 KiB or more than 128 headers: 431) are JSON too
(``_listen``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from aiohttp import web

from flodl_core import ConfigError, PathError

from ._hosts import BadHost, HostPolicy
from ._hub import HEARTBEAT, EpochClient, Hub, StreamClient, sse_frame
from ._process import DashboardServer as DashboardServer
from ._process import check_max_clients, check_stream_options
from ._records import RecordTree

MAX_N = 10_000
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",  # reverse proxies must not buffer a stream
}


class DashboardSource(Protocol):
    """What the server reads from (the :class:`~flodl_monitor.Monitor`)."""

    records: RecordTree

    def page(self) -> str | Awaitable[str | None]: ...
    def graph_svg(self) -> str | Awaitable[str | None] | None: ...
    def epochs(self) -> list[dict[str, Any]]: ...
    def attach(self, hub: Hub) -> None: ...
    def detach(self, hub: Hub) -> None: ...


HUB = web.AppKey("hub", Hub)
SOURCE = web.AppKey("source", DashboardSource)
COALESCE = web.AppKey("coalesce", float)
HOSTS = web.AppKey("hosts", HostPolicy)
STALE_TASK = web.AppKey("stale_task", asyncio.Task)


ROUTES = (
    "/",
    "/events",
    "/api/history",
    "/graph.svg",
    "/paths",
    "/node?path=",
    "/history?path=&n=",
    "/stream?path=&n=",
    "/favicon.ico",
)
"""Every route, as the 404 message lists them."""


async def _favicon(request: web.Request) -> web.Response:
    # Browsers ask for it on every page load; "no icon" is an answer, not an error to log.
    return web.Response(status=204)


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message, "status": status}, status=status)


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        if e.status == 404 and e.text and e.text.startswith("404"):
            msg = f"no route {request.method} {request.path}; routes: {', '.join(ROUTES)}"
        else:
            msg = e.text or e.reason
        return _json_error(e.status, msg)
    except ConfigError as e:
        return _json_error(400, str(e))
    except PathError as e:
        return _json_error(404, str(e))


def _local_address(request: web.Request) -> tuple[str | None, int | None]:
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    if isinstance(sock, (tuple, list)) and len(sock) >= 2:
        return str(sock[0]), int(sock[1])
    return None, None


@web.middleware
async def _host_guard(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    # Before anything else (routing, 404s): a rebound name must learn nothing, not even routes.
    header = request.headers.get("Host")
    try:
        why = request.app[HOSTS].refusal(header, *_local_address(request))
    except BadHost as e:
        return _json_error(400, f"malformed request: {e}")
    if why:
        return _json_error(
            403,
            f"Host {header!r} refused: {why}. The dashboard answers only the names it is served "
            "under (localhost, 127.0.0.1, [::1], the bound host) on its own port, which keeps "
            "other web sites out (DNS rebinding); to reach it under another name, list it: "
            "monitor.serve(port, allowed_hosts=['name']) ('name:port' behind a proxy)",
        )
    return await handler(request)


def _query(request: web.Request, allowed: tuple[str, ...]) -> dict[str, str]:
    """The query as a dict, refusing malformed, repeated and unknown parameters."""
    raw = request.rel_url.raw_query_string
    if _BAD_ESCAPE.search(raw):
        raise ConfigError("malformed query string: '%' must be followed by two hex digits")
    out: dict[str, str] = {}
    for key, value in request.rel_url.query.items():
        if key not in allowed:
            raise ConfigError(f"unknown query parameter {key!r}; expected {', '.join(allowed)}")
        if key in out:
            raise ConfigError(f"query parameter {key!r} given more than once")
        if "\ufffd" in value:
            raise ConfigError(f"query parameter {key!r} is not valid UTF-8")
        out[key] = value
    return out


def _path_of(q: dict[str, str], tree: RecordTree) -> str:
    path = q.get("path")
    if not path:
        raise ConfigError("missing query parameter 'path' (e.g. ?path=root)")
    tree.require(path)  # validates (400) and checks existence (404)
    return path


def _n_of(q: dict[str, str], default: int) -> int:
    raw = q.get("n")
    if raw is None:
        return default
    if not re.fullmatch(r"-?\d{1,12}", raw):
        raise ConfigError(f"n must be an integer, got {raw!r}")
    n = int(raw)
    if not 1 <= n <= MAX_N:
        raise ConfigError(f"n must be between 1 and {MAX_N}, got {n}")
    return n


async def _sse_start(request: web.Request, hub: Hub) -> web.StreamResponse:
    if hub.closed:
        raise web.HTTPServiceUnavailable(text="the dashboard is shutting down")
    if hub.client_count() >= hub.max_clients:
        raise web.HTTPServiceUnavailable(text=f"too many live clients (max {hub.max_clients})")
    resp = web.StreamResponse(headers=_SSE_HEADERS)
    await resp.prepare(request)
    return resp


async def _resolve(value: Any) -> Any:
    # The server process asks the training process for these; in-process they are plain values.
    return await value if inspect.isawaitable(value) else value


async def _index(request: web.Request) -> web.Response:
    _query(request, ())
    page = await _resolve(request.app[SOURCE].page())
    return web.Response(text=page, content_type="text/html", headers={"Cache-Control": "no-store"})


async def _graph_svg(request: web.Request) -> web.Response:
    svg = await _resolve(request.app[SOURCE].graph_svg())
    if svg is None:
        raise web.HTTPNotFound(text="no graph SVG: the model gave none (see Monitor.watch)")
    return web.Response(text=svg, content_type="image/svg+xml")


async def _api_history(request: web.Request) -> web.Response:
    return web.json_response(request.app[SOURCE].epochs())


async def _events(request: web.Request) -> web.StreamResponse:
    _query(request, ())
    hub = request.app[HUB]
    resp = await _sse_start(request, hub)
    # Snapshot and registration in one loop tick: epochs arrive on this loop, so none is lost
    # or sent twice between the replay and the live stream.
    hello = sse_frame("hello", {"epochs": len(hub.frames)})
    replay = b"retry: 2000\n\n" + hello + (hub.identity or b"") + b"".join(hub.frames)
    replay += b"".join(hub.alert_frames) + (hub.complete or b"")
    client = EpochClient(hub.queue_size)
    if hub.complete is None:
        hub.epoch_clients.add(client)
    try:
        await resp.write(replay)
        while hub.complete is None or not client.queue.empty():
            try:
                frame = await asyncio.wait_for(client.queue.get(), HEARTBEAT)
            except asyncio.TimeoutError:
                await resp.write(b": ping\n\n")
                continue
            if frame is None:
                break
            await resp.write(frame)
    except ConnectionResetError:
        pass
    finally:
        hub.epoch_clients.discard(client)
    return resp


async def _paths(request: web.Request) -> web.Response:
    _query(request, ())
    return web.json_response({"paths": request.app[SOURCE].records.paths()})


async def _node(request: web.Request) -> web.Response:
    q = _query(request, ("path",))
    tree = request.app[SOURCE].records
    return web.json_response(tree.node(_path_of(q, tree)))


async def _history(request: web.Request) -> web.Response:
    q = _query(request, ("path", "n"))
    tree = request.app[SOURCE].records
    path, n = _path_of(q, tree), _n_of(q, 100)
    return web.json_response({"path": path, "records": tree.history(path, n)})


async def _stream(request: web.Request) -> web.StreamResponse:
    q = _query(request, ("path", "n"))
    tree, hub = request.app[SOURCE].records, request.app[HUB]
    path, n = _path_of(q, tree), _n_of(q, 500)
    resp = await _sse_start(request, hub)
    client = StreamClient(path)
    # Registered before the snapshot: a record in between is sent twice, never lost.
    hub.stream_clients.add(client)
    coalesce = request.app[COALESCE]
    try:
        head = sse_frame("node", tree.node(path)) + sse_frame(
            "history", {"path": path, "records": tree.history(path, n)}
        )
        await resp.write(b"retry: 2000\n\n" + head)
        while not client.closed:
            try:
                await asyncio.wait_for(client.wake.wait(), HEARTBEAT)
            except asyncio.TimeoutError:
                await resp.write(b": ping\n\n")
                continue
            await asyncio.sleep(coalesce)
            client.wake.clear()
            steps, names, alerts = client.steps, client.children, client.alerts
            client.steps, client.children, client.alerts = set(), set(), []
            recs = (tree.record_at(path, s) for s in sorted(steps))
            frames = [sse_frame("record", r) for r in recs if r is not None]
            if names:
                frames.append(sse_frame("children", tree.children(path, sorted(names))))
            frames.extend(sse_frame("alert", a) for a in alerts)
            if frames:
                await resp.write(b"".join(frames))
    except ConnectionResetError:
        pass
    finally:
        hub.stream_clients.discard(client)
    return resp


async def _stale_watch(app: web.Application) -> None:
    tree = app[SOURCE].records
    while True:
        await asyncio.sleep(1.0)
        tree.check_stale()


def make_app(
    source: DashboardSource,
    *,
    max_clients: int = 64,
    queue_size: int = 256,
    coalesce: float = 0.1,
    allowed_hosts: Iterable[str] = (),
    bound_host: str | None = None,
) -> web.Application:
    """The dashboard as an aiohttp application (the hub binds to the loop that runs it).

    ``allowed_hosts``: ``Host`` names accepted besides the loopback names and the address a
    connection was made to (``"name"`` on the served port, ``"name:port"`` exactly, ``"*"`` any);
    ``bound_host``: the host the server binds, accepted too unless it is a wildcard address.
    """
    check_max_clients(max_clients)
    check_stream_options(queue_size, coalesce)
    hosts = HostPolicy.of(allowed_hosts, bound_host)
    app = web.Application(middlewares=[_host_guard, _errors])
    app[HOSTS] = hosts
    app[SOURCE] = source
    app[COALESCE] = coalesce

    async def startup(app: web.Application) -> None:
        hub = Hub(asyncio.get_running_loop(), max_clients=max_clients, queue_size=queue_size)
        app[HUB] = hub
        source.attach(hub)
        app[STALE_TASK] = asyncio.ensure_future(_stale_watch(app))

    async def shutdown(app: web.Application) -> None:
        app[HUB].close_all()
        source.detach(app[HUB])

    async def cleanup(app: web.Application) -> None:
        app[STALE_TASK].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app[STALE_TASK]

    app.on_startup.append(startup)
    app.on_shutdown.append(shutdown)
    app.on_cleanup.append(cleanup)
    for route, handler in (
        ("/", _index),
        ("/events", _events),
        ("/api/history", _api_history),
        ("/graph.svg", _graph_svg),
        ("/paths", _paths),
        ("/node", _node),
        ("/history", _history),
        ("/stream", _stream),
        ("/favicon.ico", _favicon),
    ):
        app.router.add_get(route, handler, allow_head=False)
    return app
