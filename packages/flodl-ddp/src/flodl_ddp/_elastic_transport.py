"""How a rejoining rank receives the current state from a living one, without pickle.

torchft's default heal transport serves ``torch.save`` output on every interface and unpickles
what it fetches, so any machine that can reach the port can read the weights, and a hostile peer
can run code in the receiver. :class:`StateTransport` is a drop-in ``CheckpointTransport``:

- the sender serialises the state once, when torchft asks it to send (a snapshot: training may
  go on mutating the live tensors), as a flodl state file (JSON structure plus raw tensor bytes:
  :func:`flodl_core.checkpoint.save_state_file`);
- an HTTP server bound to one address (loopback unless a trusted interface was named) serves it
  at ``/state/<step>``, only to requests that carry the run's random token;
- the receiver checks the file (magic, lengths, dtypes) while reading it back; nothing in it can
  execute code.
"""

from __future__ import annotations

import hmac
import logging
import tempfile
import threading
import urllib.error
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from flodl_core.checkpoint import read_state_file, save_state_file

logger = logging.getLogger("flodl.ddp")

TOKEN_HEADER = "X-Flodl-Run-Token"


class _Holder:
    """``state_dict()`` for :func:`save_state_file`."""

    def __init__(self, state: Any) -> None:
        self._state = state

    def state_dict(self) -> Any:
        return self._state


def encode_state(state: Any) -> bytes:
    """``state`` (dicts, lists, tuples, numbers, strings, tensors) as state-file bytes."""
    with tempfile.TemporaryDirectory(prefix="flodl-heal-") as d:
        path = Path(d) / "state"
        save_state_file(_Holder(state), path)
        return path.read_bytes()


def decode_state(blob: bytes) -> Any:
    """The inverse of :func:`encode_state`; raises ``CheckpointError`` on a malformed blob."""
    with tempfile.TemporaryDirectory(prefix="flodl-heal-") as d:
        path = Path(d) / "state"
        path.write_bytes(blob)
        _, state = read_state_file(path)
        return state


class StateTransport:
    """A torchft ``CheckpointTransport`` (``metadata``, ``send_checkpoint``,
    ``disallow_checkpoint``, ``recv_checkpoint``, ``shutdown``) over token-checked HTTP.

    Args:
        host: the address to bind and advertise (``127.0.0.1`` or a trusted interface's).
        token: the run's secret; requests without it get 403.
        timeout: default network timeout.
    """

    def __init__(self, host: str, token: str, timeout: timedelta) -> None:
        self.host = host
        self._token = token
        self._timeout = timeout
        self._ready = threading.Condition()
        self._blob: bytes | None = None
        self._step: int | None = None
        transport = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                got = self.headers.get(TOKEN_HEADER, "")
                if not hmac.compare_digest(got.encode(), transport._token.encode()):
                    self.send_error(403, "missing or wrong run token")
                    return
                parts = self.path.strip("/").split("/")
                blob = None
                if len(parts) == 2 and parts[0] == "state" and parts[1].isdigit():
                    blob = transport._wait_for(int(parts[1]))
                if blob is None:
                    self.send_error(404, "no state for that step")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(blob)))
                self.end_headers()
                self.wfile.write(blob)

            def log_message(self, format: str, *args: Any) -> None:
                logger.debug("heal server: " + format, *args)

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="flodl-heal-server", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def metadata(self) -> str:
        return f"http://{self.host}:{self.port}"

    def send_checkpoint(
        self, dst_ranks: list[int], step: int, state_dict: Any, timeout: timedelta
    ) -> None:
        blob = encode_state(state_dict)
        with self._ready:
            self._blob, self._step = blob, int(step)
            self._ready.notify_all()

    def _wait_for(self, step: int) -> bytes | None:
        # A receiver may ask before the sender's quorum thread has taken the snapshot.
        with self._ready:
            self._ready.wait_for(lambda: self._step == step, self._timeout.total_seconds())
            return self._blob if self._step == step else None

    def disallow_checkpoint(self) -> None:
        # The blob is a snapshot taken in send_checkpoint, so training may mutate the live
        # tensors; it is kept until the next send for a receiver that asks late.
        return None

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> Any:
        req = urllib.request.Request(
            f"{metadata}/state/{int(step)}", headers={TOKEN_HEADER: self._token}
        )
        with urllib.request.urlopen(req, timeout=timeout.total_seconds()) as resp:
            blob = resp.read()
        return decode_state(blob)

    def shutdown(self, wait: bool = True) -> None:
        self._server.shutdown()
        self._server.server_close()
        if wait:
            self._thread.join(5.0)
