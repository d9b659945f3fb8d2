"""Putting the dashboard app on a socket, with JSON answers for requests refused while parsing.

aiohttp refuses an over-long request line or header in its HTTP parser, before routing and before
any middleware, and answers in plain text. The dashboard's every other 4xx is a JSON body, so the
connections here are served by a request handler whose error answer is JSON too and names the
limit that was hit. The two limits differ so that the limit an error reports tells which one it
was: the request line (the URL) or one header.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler

MAX_REQUEST_LINE = 8190  # bytes: "GET <url> HTTP/1.1" (aiohttp's default)
MAX_HEADER = 16_384  # bytes: one header, name and value
MAX_HEADERS = 128  # headers per request (aiohttp's default)
HANDLER_ARGS = {
    "max_line_size": MAX_REQUEST_LINE,
    "max_field_size": MAX_HEADER,
    "max_headers": MAX_HEADERS,
}
logger = logging.getLogger("flodl.monitor")


def parse_error_body(
    status: int, exc: BaseException | None, message: str | None
) -> tuple[int, str]:
    """The status and message for a request the HTTP parser refused."""
    if isinstance(exc, LineTooLong):
        limit = str(exc.args[1]) if len(exc.args) > 1 else ""
        if limit == str(MAX_REQUEST_LINE):
            return 414, (
                f"request line too long: the URL and method must fit in {MAX_REQUEST_LINE} "
                "bytes; shorten the URL (query values included)"
            )
        return 431, (
            f"request header too long: each header (name and value) must fit in {MAX_HEADER} "
            "bytes; drop or shorten the large header (often a cookie)"
        )
    if isinstance(exc, BadHttpMessage) and "Too many headers" in str(exc.message):
        return 431, f"too many request headers: at most {MAX_HEADERS} are accepted"
    text = message or (exc.message if isinstance(exc, BadHttpMessage) else "") or "bad request"
    return status, f"malformed HTTP request: {text}"


class _JsonErrorHandler(RequestHandler):
    """aiohttp's per-connection handler, answering parse errors (4xx) as JSON."""

    __slots__ = ()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not 400 <= status < 500:
            return super().handle_error(request, status, exc, message)
        # A client's malformed request is not a server fault: no traceback in the log.
        logger.debug("refused a malformed request: %s", exc)
        status, text = parse_error_body(status, exc, message)
        resp = web.Response(
            status=status,
            text=json.dumps({"error": text, "status": status}),
            content_type="application/json",
        )
        resp.force_close()
        return resp


class _JsonErrorServer(web.Server):
    """aiohttp's connection factory, making :class:`_JsonErrorHandler` connections."""

    def __call__(self) -> RequestHandler:
        handler = super().__call__()
        # aiohttp offers no hook for the parser's error answer; the subclass adds no state.
        handler.__class__ = _JsonErrorHandler
        return handler


async def make_runner(app: web.Application, *, shutdown_timeout: float = 2.0) -> web.AppRunner:
    """Set ``app`` up (its startup hooks run) without listening yet."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=shutdown_timeout, **HANDLER_ARGS)
    await runner.setup()
    server = runner.server
    if server is not None and type(server) is web.Server:
        server.__class__ = _JsonErrorServer
    return runner


async def listen(runner: web.AppRunner, host: str, port: int) -> int:
    """Listen on ``host:port`` (0: a free port); returns the bound port.

    Raises ``OSError`` when the address cannot be bound.
    """
    await web.TCPSite(runner, host, port).start()
    return int(runner.addresses[0][1])
