"""Every dashboard route through aiohttp's test client, plus one real started server."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import aiohttp
import pytest

from flodl_core import ConfigError
from flodl_monitor import Alert, Monitor

pytestmark = pytest.mark.asyncio


def _monitor(total: int = 10, **kw: Any) -> Monitor:
    return Monitor(total, stream=io.StringIO(), resources=False, **kw)


async def _frames(
    resp: aiohttp.ClientResponse, until: str, timeout: float = 5.0
) -> list[tuple[str, Any]]:
    """Read SSE frames up to and including the first ``until`` event."""
    out: list[tuple[str, Any]] = []
    event, data = None, None

    async def read() -> None:
        nonlocal event, data
        while True:
            line = (await resp.content.readline()).decode()
            if not line:
                raise AssertionError(f"stream ended before {until!r}; got {[e for e, _ in out]}")
            line = line.rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
            elif line == "" and event is not None:
                out.append((event, data))
                if event == until:
                    return
                event, data = None, None

    await asyncio.wait_for(read(), timeout)
    return out


async def test_index_history_and_svg(aiohttp_client: Any) -> None:
    m = _monitor()
    m.set_identity("net", "abc123")
    client = await aiohttp_client(m.app())
    resp = await client.get("/")
    assert resp.status == 200 and resp.content_type == "text/html"
    page = await resp.text()
    assert '"label":"net"' in page and '"mode":"live"' in page
    assert (await client.get("/graph.svg")).status == 404
    m.set_svg("<svg></svg>")
    svg = await client.get("/graph.svg")
    assert svg.status == 200 and svg.content_type == "image/svg+xml"
    m.log(0, 0.1, {"loss": 2.0})
    m.log(1, 0.1, {"loss": 1.0})
    hist = await (await client.get("/api/history")).json()
    assert [e["epoch"] for e in hist] == [1, 2] and hist[0]["metrics"] == {"loss": 2.0}


async def test_late_join_replays_every_epoch_then_streams_live(aiohttp_client: Any) -> None:
    m = _monitor(5)
    for e in range(3):
        m.log(e, 0.1, {"loss": 1.0 / (e + 1)})
    client = await aiohttp_client(m.app())
    resp = await client.get("/events")
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    frames = await _frames(resp, "epoch")
    assert frames[0] == ("hello", {"epochs": 3})
    frames += await _frames(resp, "epoch") + await _frames(resp, "epoch")
    assert [d["epoch"] for e, d in frames if e == "epoch"] == [1, 2, 3]
    m.log(3, 0.1, {"loss": 0.1})
    live = await _frames(resp, "epoch")
    assert live[-1][1]["epoch"] == 4 and live[-1][1]["eta"] >= 0
    m.log(4, 0.1, {"loss": 0.05})
    m.finish()
    tail = await _frames(resp, "complete")
    assert [e for e, _ in tail] == ["epoch", "complete"] and tail[-1][1]["epochs"] == 5
    assert await resp.content.read() == b""  # the stream ends after complete

    late = await client.get("/events")  # after the run: full replay, then complete
    frames = await _frames(late, "complete")
    assert [d["epoch"] for e, d in frames if e == "epoch"] == [1, 2, 3, 4, 5]


async def test_alerts_are_streamed_to_every_page(aiohttp_client: Any) -> None:
    m = _monitor(5)
    client = await aiohttp_client(m.app())
    resp = await client.get("/events")
    await _frames(resp, "hello")
    m.log(0, 0.1, {"loss": float("nan")})
    frames = await _frames(resp, "alert")
    assert frames[-1][1]["kind"] == "nan_loss"


async def test_record_tree_routes(aiohttp_client: Any) -> None:
    m = _monitor(record_path=None)
    tree = m.records
    for s in range(4):
        for r in range(3):
            tree.publish(
                f"root/host-{'ab'[r % 2]}/rank{r}",
                {"loss": float(s + r), "throughput": 10.0},
                step=s,
            )
    client = await aiohttp_client(m.app())
    paths = (await (await client.get("/paths")).json())["paths"]
    assert paths == ["root", "root/host-a", "root/host-a/rank0", "root/host-a/rank2",
                     "root/host-b", "root/host-b/rank1"]  # fmt: skip
    node = await (await client.get("/node", params={"path": "root"})).json()
    assert node["kind"] == "interior" and node["latest"]["metrics"] == {
        "loss": 4.0,
        "throughput": 30.0,
    }
    assert [c["name"] for c in node["children"]] == ["host-a", "host-b"]
    hist = await (await client.get("/history", params={"path": "root/host-a", "n": "2"})).json()
    assert [h["step"] for h in hist["records"]] == [2, 3]
    assert hist["records"][0]["agg"] == {"loss": "mean", "throughput": "sum"}
    leaf = await (await client.get("/history?path=root/host-b/rank1")).json()
    assert len(leaf["records"]) == 4


async def test_stream_coalesces_rank_updates_into_rollups(aiohttp_client: Any) -> None:
    m = _monitor(record_path=None)
    tree = m.records
    for r in range(50):
        tree.publish(f"root/h/rank{r}", {"loss": 1.0}, step=0)
    client = await aiohttp_client(m.app(coalesce=0.05))
    resp = await client.get("/stream", params={"path": "root/h"})
    head = await _frames(resp, "history")
    assert head[0][0] == "node" and head[0][1]["leaves"] == 50
    assert [h["step"] for h in head[1][1]["records"]] == [0]
    for r in range(50):  # 50 ranks report step 1 within one coalescing window
        tree.publish(f"root/h/rank{r}", {"loss": 0.5}, step=1)
    frames = await _frames(resp, "children")
    records = [d for e, d in frames if e == "record"]
    assert len(records) == 1 and records[0]["step"] == 1 and records[0]["n"] == 50
    children = frames[-1][1]
    assert len(children) == 50 and all(c["latest"]["step"] == 1 for c in children)
    m.records.alert(Alert("rank_lost", "root/h/rank7", "root/h/rank7 stopped reporting"))
    alert = await _frames(resp, "alert")
    assert alert[-1][1]["path"] == "root/h/rank7"


@pytest.mark.parametrize(
    ("url", "status", "match"),
    [
        ("/node", 400, "missing query parameter 'path'"),
        ("/node?path=", 400, "missing query parameter 'path'"),
        ("/node?path=root/nope", 404, "no record path 'root/nope'"),
        ("/node?path=root/../../etc/passwd", 400, "bad segment '..'"),
        ("/node?path=root%2F..%2F..%2Fetc", 400, "bad segment '..'"),
        ("/node?path=/etc/passwd", 400, "must start with 'root'"),
        ("/node?path=root/%ZZ", 400, "'%ZZ'"),  # the test client re-escapes '%'; raw below
        ("/node?path=root/%FF%FE", 400, "not valid UTF-8"),
        ("/node?path=root&path=root", 400, "given more than once"),
        ("/node?path=root&x=1", 400, "unknown query parameter 'x'"),
        ("/history?path=root&n=-1", 400, "n must be between 1 and 10000"),
        ("/history?path=root&n=0", 400, "n must be between"),
        ("/history?path=root&n=10001", 400, "n must be between"),
        ("/history?path=root&n=99999999999999999999", 400, "n must be an integer"),
        ("/history?path=root&n=abc", 400, "n must be an integer"),
        ("/history?path=root&n=1.5", 400, "n must be an integer"),
        ("/stream?path=root/missing", 404, "no record path"),
        ("/stream?path=root&n=-5", 400, "n must be between"),
        ("/paths?x=1", 400, "unknown query parameter"),
        ("/nowhere", 404, "no route GET /nowhere"),
    ],
)
async def test_bad_requests_get_json_errors_and_the_server_keeps_serving(
    aiohttp_client: Any, url: str, status: int, match: str
) -> None:
    m = _monitor()
    m.log(0, 0.1, {"loss": 1.0})
    client = await aiohttp_client(m.app())
    resp = await client.get(url)
    assert resp.status == status
    body = await resp.json()
    assert match in body["error"] and body["status"] == status
    assert (await client.get("/node?path=root")).status == 200


async def test_wrong_method_is_a_json_405(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_monitor().app())
    resp = await client.post("/node?path=root")
    assert resp.status == 405 and (await resp.json())["status"] == 405


async def test_client_cap(aiohttp_client: Any) -> None:
    m = _monitor()
    client = await aiohttp_client(m.app(max_clients=2))
    a = await client.get("/events")
    b = await client.get("/stream?path=root")
    await _frames(a, "hello")
    await _frames(b, "history")
    c = await client.get("/events")
    assert c.status == 503 and "too many live clients (max 2)" in (await c.json())["error"]
    a.close()
    await asyncio.sleep(0.05)
    d = await client.get("/events")
    assert d.status == 200
    with pytest.raises(ConfigError, match="max_clients"):
        m.app(max_clients=0)
    with pytest.raises(ConfigError, match="queue_size must be an int >= 1"):
        m.app(queue_size=0)  # would drop every client at every epoch


async def test_a_client_that_falls_behind_is_dropped_not_buffered(aiohttp_client: Any) -> None:
    m = _monitor(100)
    app = m.app(queue_size=4)
    client = await aiohttp_client(app)
    resp = await client.get("/events")
    await _frames(resp, "hello")
    hub = next(iter(m._hubs))
    (slow,) = hub.epoch_clients
    for e in range(10):  # pushed while the handler cannot run: the queue overflows
        hub._broadcast("epoch", {"epoch": e})
    assert slow not in hub.epoch_clients  # dropped at once, its backlog freed
    rest = await asyncio.wait_for(resp.content.read(), 5)
    assert rest == b""  # the stream ends; the browser reconnects and replays the history


async def test_favicon_is_answered_and_404_lists_every_route(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_monitor().app())
    assert (await client.get("/favicon.ico")).status == 204
    body = await (await client.get("/nope")).json()
    for route in ("/", "/events", "/api/history", "/graph.svg", "/paths", "/node?path=",
                  "/history?path=&n=", "/stream?path=&n=", "/favicon.ico"):  # fmt: skip
        assert route in body["error"]


async def test_identity_reaches_a_page_opened_before_the_first_log(aiohttp_client: Any) -> None:
    import torch

    m = _monitor()
    client = await aiohttp_client(m.app())
    page = await (await client.get("/")).text()
    assert '"hash":null' in page  # nothing known yet when the page was rendered
    resp = await client.get("/events")

    class Observed(torch.nn.Linear):
        def latest_metrics(self) -> dict[str, float]:
            return {"loss": 1.0}

    m.log(0, 0.1, Observed(2, 3))
    frames = await _frames(resp, "epoch")
    ident = dict(frames)["identity"]
    assert ident["parameters"]["total"] == 9
    # A page that joins later gets it in the replay.
    late = await _frames(await client.get("/events"), "epoch")
    assert dict(late)["identity"] == ident
