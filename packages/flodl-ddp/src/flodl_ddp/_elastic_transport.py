"""How a rejoining rank receives the current state from a living one, without pickle.

:class:`StateTransport` is a drop-in torchft ``CheckpointTransport`` (torchft's own serves
``torch.save`` output on every interface and unpickles what it fetches). The sender snapshots the
state as a flodl state file when torchft asks it to send; an HTTP server bound to one address serves
it at ``/state/<step>`` only to requests signed with the run's token (HMAC-SHA256 of the step and a
fresh nonce, :func:`request_signature`, checked with :func:`hmac.compare_digest`; a seen nonce is
refused). The receiver streams the answer to a temporary file capped at ``max_bytes`` (before
reading, by ``Content-Length``, or as soon as the body passes it), then checks it while reading it
back; nothing in it can execute code.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import re
import secrets
import tempfile
import threading
import urllib.request
from collections.abc import Callable
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from flodl_core import CheckpointError
from flodl_core.checkpoint import read_state_file, save_state_file

logger = logging.getLogger("flodl.ddp")

NONCE_HEADER = "X-Flodl-Nonce"
SIGNATURE_HEADER = "X-Flodl-Signature"
DEFAULT_MAX_BYTES = 16 << 30  # a 1.3 B-parameter float32 model with Adam's moments, bounded
NONCES_KEPT = 4096  # recent nonces a server remembers, to refuse a replayed request
_CHUNK = 1 << 20
_NONCE = re.compile(r"[0-9a-f]{32,128}")


def encode_state(state: Any) -> bytes:
    """``state`` (dicts, lists, tuples, numbers, strings, tensors) as state-file bytes."""
    with tempfile.TemporaryDirectory(prefix="flodl-heal-") as d:
        save_state_file(SimpleNamespace(state_dict=lambda: state), path := Path(d) / "state")
        return path.read_bytes()


def request_signature(token: str, step: int, nonce: str) -> str:
    """A request's signature: hex HMAC-SHA256 of ``state/<step>/<nonce>``, keyed by ``token``."""
    msg = f"state/{int(step)}/{nonce}".encode()
    return hmac.new(token.encode(), msg, hashlib.sha256).hexdigest()


def size_bound(state: Any, factor: int = 8, slack: int = 64 << 20) -> int:
    """A bound on a heal state derived from a state of the same model that the receiver holds
    (its own ``state_dict()``): ``factor`` times the bytes of its tensors, plus ``slack`` (what
    it receives, model plus Adam's two moments plus controllers, is well under 8 copies)."""
    return factor * _tensor_bytes(state) + slack


def _tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        obj = list(obj.values())
    return sum(_tensor_bytes(v) for v in obj) if isinstance(obj, (list, tuple)) else 0


class StateTransport:
    """A torchft ``CheckpointTransport`` over signed HTTP, bound to and advertising ``host``
    (``127.0.0.1`` or a trusted interface's). ``token``: the run's secret, which keys the
    signatures (a request without a valid one gets 403); ``timeout``: the default network
    timeout; ``max_bytes``: the most bytes a received state may have (or a function giving it at
    each receive, e.g. ``lambda: size_bound(engine.state_dict())``)."""

    def __init__(
        self,
        host: str,
        token: str,
        timeout: timedelta,
        max_bytes: int | Callable[[], int] = DEFAULT_MAX_BYTES,
    ) -> None:
        self.host, self._token, self._timeout, self._max_bytes = host, token, timeout, max_bytes
        self._ready, self._seen_lock = threading.Condition(), threading.Lock()
        self._blob: bytes | None = None
        self._step: int | None = None
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        transport = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                step = transport._admit(self.path, self.headers)
                if isinstance(step, str):
                    self.send_error(403, step)
                    return
                blob = transport._wait_for(step)
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
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def metadata(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _admit(self, path: str, headers: Any) -> int | str:
        """The step a request may have, or why it is refused (the 403's reason)."""
        parts = path.strip("/").split("/")
        nonce = headers.get(NONCE_HEADER, "")
        got = headers.get(SIGNATURE_HEADER, "")
        if not (len(parts) == 2 and parts[0] == "state" and parts[1].isdigit()):
            return "unsigned or malformed request"
        if not _NONCE.fullmatch(nonce) or not got:
            return "missing run signature"
        step = int(parts[1])
        want = request_signature(self._token, step, nonce)
        if not hmac.compare_digest(got.encode(), want.encode()):
            return "wrong run signature"
        with self._seen_lock:
            if nonce in self._seen:
                return "replayed request"
            self._seen[nonce] = None
            while len(self._seen) > NONCES_KEPT:
                self._seen.popitem(last=False)
        return step

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
        """Nothing: the blob is a snapshot, kept until the next send for a late receiver."""

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> Any:
        nonce = secrets.token_hex(16)
        url = f"{metadata}/state/{int(step)}"
        sig = request_signature(self._token, int(step), nonce)
        req = urllib.request.Request(url, headers={NONCE_HEADER: nonce, SIGNATURE_HEADER: sig})
        limit = int(self._max_bytes() if callable(self._max_bytes) else self._max_bytes)
        with tempfile.TemporaryDirectory(prefix="flodl-heal-") as d:
            with urllib.request.urlopen(req, timeout=timeout.total_seconds()) as resp:
                _save_bounded(resp, path := Path(d) / "state", limit, url)
            return read_state_file(path)[1]

    def shutdown(self, wait: bool = True) -> None:
        self._server.shutdown()
        self._server.server_close()
        if wait:
            self._thread.join(5.0)


def _save_bounded(resp: Any, path: Path, limit: int, url: str) -> None:
    """Stream the body of ``resp`` into ``path``; ``CheckpointError`` for a body longer than
    ``limit`` bytes (refused unread when its declared length says so) or shorter than declared."""
    declared = resp.headers.get("Content-Length")
    try:
        size = None if declared is None else int(declared)
    except ValueError:
        raise CheckpointError(f"heal state from {url}: bad Content-Length {declared!r}") from None
    if size is not None and size > limit:
        raise CheckpointError(
            f"heal state from {url} is {size} bytes, more than the receiver's limit of "
            f"{limit} bytes (StateTransport max_bytes); refused before reading it"
        )
    got = 0
    with open(path, "wb") as f:
        while chunk := resp.read(min(_CHUNK, limit + 1 - got)):
            got += len(chunk)
            if got > limit:
                raise CheckpointError(
                    f"heal state from {url} passed the receiver's limit of {limit} bytes "
                    "(StateTransport max_bytes) without a declared length; refused"
                )
            f.write(chunk)
    if size is not None and got != size:
        raise CheckpointError(f"heal state from {url} cut at byte {got} of {size} (link lost?)")
