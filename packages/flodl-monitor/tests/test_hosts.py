"""The Host check (DNS rebinding): the rule alone, and through aiohttp's test client."""

from __future__ import annotations

import io
from typing import Any

import pytest

from flodl_core import ConfigError
from flodl_monitor import Monitor
from flodl_monitor._hosts import BadHost, HostPolicy, machine_names, parse_host


def _app(**opts: Any) -> Any:
    return Monitor(3, stream=io.StringIO(), resources=False).app(**opts)


@pytest.mark.parametrize(
    ("header", "parsed"),
    [
        ("localhost:8080", ("localhost", 8080)),
        ("LocalHost.:8080", ("localhost", 8080)),
        ("127.0.0.1", ("127.0.0.1", 80)),
        ("[::1]:3000", ("::1", 3000)),
        ("[0:0:0:0:0:0:0:1]", ("::1", 80)),
        ("dash.lab", ("dash.lab", 80)),
    ],
)
def test_parse_host(header: str, parsed: tuple[str, int]) -> None:
    assert parse_host(header) == parsed


@pytest.mark.parametrize(
    ("header", "match"),
    [
        ("[::1", "without closing"),
        ("[localhost]:80", "not an IPv6 address"),
        ("[::1]x", "after the address"),
        ("a b:80", "not a host name"),
        ("evil.example:http", "has port 'http'"),
        ("evil.example:70000", "has port '70000'"),
        ("", "not a host name"),
    ],
)
def test_parse_host_errors(header: str, match: str) -> None:
    with pytest.raises(BadHost, match=match):
        parse_host(header)


def test_policy() -> None:
    policy = HostPolicy.of()
    ok = [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("localhost:8000", "127.0.0.1"),
        ("[::1]:8000", "::1"),
        ("127.0.0.2:8000", "127.0.0.1"),  # any loopback literal
        ("10.0.0.5:8000", "10.0.0.5"),  # the address the connection was made to
        ("10.0.0.5:8000", "::ffff:10.0.0.5"),  # ... on a dual-stack socket
    ]
    for header, local in ok:
        assert policy.refusal(header, local, 8000) == "", header
    assert "not a name" in policy.refusal("evil.example:8000", "127.0.0.1", 8000)
    assert "not a name" in policy.refusal("10.0.0.6:8000", "10.0.0.5", 8000)
    assert "port 8001 is not the port" in policy.refusal("localhost:8001", "127.0.0.1", 8000)
    assert "port 80 is not the port" in policy.refusal("localhost", "127.0.0.1", 8000)
    assert policy.refusal("localhost", "127.0.0.1", 80) == ""
    with pytest.raises(BadHost, match="no Host header"):
        policy.refusal(None, "127.0.0.1", 8000)
    # names the user allowed, the bound host, "name:port" pairs and "*"
    allowed = HostPolicy.of(["Dash.Lab", "proxy.lab:443", "[fe80::1]:9"], bound_host="box.lan")
    assert allowed.refusal("dash.lab:8000", "127.0.0.1", 8000) == ""
    assert allowed.refusal("box.lan:8000", "10.0.0.5", 8000) == ""
    assert allowed.refusal("proxy.lab:443", "127.0.0.1", 8000) == ""
    assert allowed.refusal("[fe80::1]:9", "127.0.0.1", 8000) == ""
    assert allowed.refusal("proxy.lab:8000", "127.0.0.1", 8000) != ""
    assert allowed.refusal("dash.lab:9999", "127.0.0.1", 8000) != ""
    # bound to every interface: reachable by this machine's own name too, not when loopback
    me = max(machine_names(), key=len, default="localhost")
    assert HostPolicy.of(bound_host="0.0.0.0").refusal(f"{me}:8000", "10.0.0.5", 8000) == ""
    assert me in HostPolicy.of(bound_host="box.lan").names
    assert HostPolicy.of(bound_host="127.0.0.1").names == frozenset({"127.0.0.1"})
    assert HostPolicy.of(bound_host="localhost").names == frozenset({"localhost"})
    assert HostPolicy.of().refusal(f"{me}.invalid:8000", "127.0.0.1", 8000) != ""
    assert HostPolicy.of(["*"]).refusal("anything:1", "127.0.0.1", 8000) == ""
    assert HostPolicy.of(["*"]).refusal(None, None, None) == ""


@pytest.mark.parametrize(
    ("allowed", "match"),
    [
        ("dash.lab", r"got the string 'dash.lab'; write \['dash.lab'\]"),
        ([""], "entry '' is not a host name"),
        ([3], "entry 3 is not a host name"),
        (["a b"], "entry 'a b': .* not a host name"),
    ],
)
def test_bad_allowed_hosts(allowed: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        HostPolicy.of(allowed)
    with pytest.raises(ConfigError, match=match):
        _app(allowed_hosts=allowed)


@pytest.mark.asyncio
async def test_foreign_hosts_get_403_on_every_route(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app())
    port = client.port
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        resp = await client.get("/api/history", headers={"Host": host})
        assert resp.status == 200, host
    for path in ("/", "/api/history", "/events", "/paths", "/no-such-route"):
        resp = await client.get(path, headers={"Host": f"evil.example:{port}"})
        assert resp.status == 403, path
        body = await resp.json()
        assert body["status"] == 403
        assert f"Host 'evil.example:{port}' refused" in body["error"]
        assert "allowed_hosts=['name']" in body["error"]
    other = await client.get("/", headers={"Host": f"localhost:{port + 1}"})
    assert (
        other.status == 403
        and f"is not the port this dashboard serves ({port})" in (await other.json())["error"]
    )
    bad = await client.get("/", headers={"Host": "a b"})
    assert bad.status == 400 and "malformed request" in (await bad.json())["error"]


@pytest.mark.asyncio
async def test_allowed_and_bound_hosts_are_served(aiohttp_client: Any) -> None:
    client = await aiohttp_client(_app(allowed_hosts=["dash.lab", "proxy.lab:443"]))
    port = client.port
    for host in (f"dash.lab:{port}", "proxy.lab:443"):
        assert (await client.get("/paths", headers={"Host": host})).status == 200, host
    assert (await client.get("/paths", headers={"Host": "proxy.lab:444"})).status == 403
    bound = await aiohttp_client(_app(bound_host="box.lan"))
    assert (await bound.get("/paths", headers={"Host": f"box.lan:{bound.port}"})).status == 200
    anyone = await aiohttp_client(_app(allowed_hosts=["*"]))
    assert (await anyone.get("/paths", headers={"Host": "evil.example"})).status == 200
