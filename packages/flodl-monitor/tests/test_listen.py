"""Requests refused by aiohttp's HTTP parser (too long, too many headers) get JSON answers."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from typing import Any

import pytest

from flodl_monitor import Monitor
from flodl_monitor._listen import MAX_HEADER, MAX_HEADERS, MAX_REQUEST_LINE, listen, make_runner

pytestmark = pytest.mark.asyncio


def raw_request(port: int, data: bytes) -> tuple[int, dict[str, str], Any]:
    """Send ``data`` as is; the status, the headers and the JSON body of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf or len(buf.split(b"\r\n\r\n", 1)[1]) < _length(buf):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, json.loads(body)


def _length(buf: bytes) -> int:
    for line in buf.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 1 << 30


OVERSIZED = [
    (b"GET /node?path=" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, MAX_REQUEST_LINE),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n", 431, MAX_HEADER),
    (b"GET / HTTP/1.1\r\nHost: x\r\n" + b"Y" * 20_000 + b": 1\r\n\r\n", 431, MAX_HEADER),
    (
        b"GET / HTTP/1.1\r\nHost: x\r\n"
        + b"".join(b"X-%d: 1\r\n" % i for i in range(MAX_HEADERS + 10))
        + b"\r\n",
        431,
        MAX_HEADERS,
    ),
]


@pytest.mark.parametrize(("data", "status", "limit"), OVERSIZED)
async def test_oversized_requests_get_json_naming_the_limit(
    data: bytes, status: int, limit: int
) -> None:
    m = Monitor(2, stream=io.StringIO(), resources=False)
    runner = await make_runner(m.app())
    try:
        port = await listen(runner, "127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        code, headers, body = await loop.run_in_executor(None, raw_request, port, data)
        assert code == status and headers["content-type"].startswith("application/json")
        assert body["status"] == status and str(limit) in body["error"]
        # The server keeps serving.
        ok = f"GET /paths HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n"
        code, _, body = await loop.run_in_executor(None, raw_request, port, ok.encode())
        assert code == 200 and body == {"paths": ["root"]}
    finally:
        await runner.cleanup()


async def test_other_malformed_requests_are_json_400s() -> None:
    runner = await make_runner(Monitor(2, stream=io.StringIO(), resources=False).app())
    try:
        port = await listen(runner, "127.0.0.1", 0)
        loop = asyncio.get_running_loop()
        data = b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"
        code, _, body = await loop.run_in_executor(None, raw_request, port, data)
        assert code == 400 and body["status"] == 400
        assert body["error"].startswith("malformed HTTP request")
    finally:
        await runner.cleanup()
