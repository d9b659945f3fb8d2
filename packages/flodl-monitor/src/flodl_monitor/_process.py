"""Serving the dashboard from its own process: :class:`DashboardServer`.

The training process starts ``python -c <boot>`` (no ``multiprocessing``: a training script
without a ``__main__`` guard would run again in a spawned child), seeds it, and from then on
encodes each event once and queues the bytes to its stdin (``_remote``); the server process
(``_child``) fans them out. Writing to 50 browsers then never takes the training process's
interpreter lock. The server exits on :meth:`DashboardServer.stop`, and on its own when the
training process goes away (end of its input, or its parent process gone).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterable
from typing import Any

from flodl_core import ConfigError, check_finite, check_int

from . import _wire as wire
from ._hosts import HostPolicy
from ._remote import Channel, RemoteHub, Source, answer_questions, tree_config, tree_snapshot

START_TIMEOUT = 120.0  # seconds for the server process to import and listen (a loaded machine)
STALE_EVERY = 1.0  # seconds between checks for ranks that stopped reporting
logger = logging.getLogger("flodl.monitor")


def check_max_clients(max_clients: int) -> None:
    check_int(max_clients, "max_clients", ge=1)


def check_stream_options(queue_size: int, coalesce: float) -> None:
    """``queue_size``: frames a client may lag by (0 would drop every client at every epoch);
    ``coalesce``: seconds between a stream's flushes."""
    check_int(queue_size, "queue_size", ge=1, note="frames a live client may fall behind by")
    check_finite(coalesce, "coalesce", ge=0, expected="a finite number of seconds >= 0")


# The server process runs with the training process's import path, so it imports the same code.
# It needs the monitor's server modules and flodl_core's light helpers (errors, argument checks)
# only: it loads both packages without running their ``__init__`` (which would import torch:
# seconds and hundreds of MB for nothing), and falls back to plain imports if that ever fails.
_LIGHT_CORE = ("_errors", "_checks")
_BOOT = f"""
import importlib, importlib.util, json, sys
sys.path[:] = json.loads(sys.argv[1])["path"]
def bare(name):
    mod = importlib.util.module_from_spec(importlib.util.find_spec(name))
    sys.modules[name] = mod
    return mod
try:
    core = bare("flodl_core")
    for sub in {_LIGHT_CORE!r}:
        light = importlib.import_module("flodl_core." + sub)
        core.__dict__.update({{k: v for k, v in vars(light).items() if not k.startswith("_")}})
    bare("flodl_monitor")
    from flodl_monitor._child import main
except ImportError:
    for name in [m for m in sys.modules if m.split(".")[0] in ("flodl_core", "flodl_monitor")]:
        del sys.modules[name]
    from flodl_monitor._child import main
main()
"""


class DashboardServer:
    """Serves :func:`make_app` from a separate process, fed by the training process.

    :meth:`start` spawns the server process, seeds it with everything logged so far and returns
    once it listens; ``source`` is the :class:`~flodl_monitor.Monitor`. A server starts once.
    ``allowed_hosts``: ``Host`` names accepted besides loopback and the bound host (see
    :func:`make_app`).
    """

    def __init__(
        self,
        source: Source,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        max_clients: int = 64,
        queue_size: int = 256,
        coalesce: float = 0.1,
        allowed_hosts: Iterable[str] = (),
    ) -> None:
        if not isinstance(host, str):
            raise ConfigError(
                f"host must be a str (an address of this machine: '127.0.0.1', '0.0.0.0' for "
                f"every interface), got {type(host).__name__} {host!r}"
            )
        check_int(port, "port", ge=0, le=65535, note="0 picks a free one")
        check_max_clients(max_clients)
        check_stream_options(queue_size, coalesce)
        HostPolicy.of(allowed_hosts, host)  # a bad entry fails here, not in the server process
        self.host, self.port = host, port
        self._source = source
        self._opts = {
            "max_clients": max_clients,
            "queue_size": queue_size,
            "coalesce": coalesce,
            "allowed_hosts": list(allowed_hosts),
        }
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._hub: RemoteHub | None = None
        self._answers: threading.Thread | None = None
        self._handshake: dict[str, Any] = {}
        self._shaken = threading.Event()
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        shown = "127.0.0.1" if self.host in ("", "0.0.0.0", "::") else self.host
        shown = f"[{shown}]" if ":" in shown else shown
        return f"http://{shown}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process's id while it runs."""
        return self._proc.pid if self._proc is not None else None

    def start(self) -> str:
        if self._proc is not None:
            raise ConfigError(f"already serving at {self.url}; call stop() first")
        if self._stopping.is_set():
            raise ConfigError("this DashboardServer was stopped; create a new one to serve again")
        records = self._source.records
        cfg = {
            "path": sys.path,
            "host": self.host,
            "port": self.port,
            "ppid": os.getpid(),
            "tree": tree_config(records),
            **self._opts,
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=-1,  # buffered: the answers are read line by line
        )
        assert proc.stdin is not None and proc.stdout is not None
        fd = os.dup(proc.stdin.fileno())  # the channel owns the write end from now on
        proc.stdin.close()
        proc.stdin = None
        self._proc, self._channel = proc, Channel(fd)
        self._hub = hub = RemoteHub(self._channel, records)
        self._answers = threading.Thread(
            target=self._read_answers, name="flodl-dashboard-answers", daemon=True
        )
        self._answers.start()
        # Seed while live events are held back, so the copy starts from a consistent snapshot
        # and every later record arrives after it.
        self._channel.hold()
        records.add_listener(hub.on_tree)
        self._source.attach(hub)
        self._channel.release(wire.SEED_TREE, json.dumps(tree_snapshot(records)).encode())
        self._channel.put(wire.SEEDED)
        self._wait_until_listening()
        atexit.register(self.stop)
        threading.Thread(
            target=self._stale_watch, name="flodl-dashboard-stale", daemon=True
        ).start()
        return self.url

    def _wait_until_listening(self) -> None:
        ok = self._shaken.wait(START_TIMEOUT)
        error = self._handshake.get("error")
        if ok and error is None and "port" in self._handshake:
            self.port = int(self._handshake["port"])
            return
        if not ok:
            error = f"the server process did not start within {START_TIMEOUT:g} s"
        elif error is None:
            error = "the server process exited while starting (its error is printed above)"
        self._shutdown(timeout=5.0)
        raise ConfigError(
            f"cannot serve the dashboard on {self.host}:{self.port} ({error}); "
            "pick another port, or port=0 for a free one; host must be an address of this "
            "machine ('127.0.0.1', or '0.0.0.0' for every interface)"
        )

    def _read_answers(self) -> None:
        proc, channel = self._proc, self._channel
        assert proc is not None and proc.stdout is not None and channel is not None
        first = proc.stdout.readline()
        try:
            self._handshake = json.loads(first) if first else {}
        except ValueError:
            self._handshake = {"error": f"unexpected output {first[:200]!r}"}
        self._shaken.set()
        if "port" not in self._handshake:
            return
        answer_questions(proc.stdout, self._source, channel)
        if not self._stopping.is_set():
            code = proc.wait()
            logger.warning(
                "the dashboard server process exited (code %s); training continues without it",
                code,
            )

    def _stale_watch(self) -> None:
        # Ranks that stop reporting are noticed even while training itself is stuck.
        while not self._stopping.wait(STALE_EVERY):
            self._source.records.check_stale()

    def stop(self, timeout: float = 5.0) -> None:
        """Close every stream, stop the server process and wait for it (idempotent)."""
        if self._proc is None:
            return
        atexit.unregister(self.stop)
        self._shutdown(timeout)

    def _shutdown(self, timeout: float) -> None:
        proc, channel, hub = self._proc, self._channel, self._hub
        self._proc = self._channel = self._hub = None
        self._stopping.set()
        if hub is not None:
            self._source.detach(hub)
            self._source.records.remove_listener(hub.on_tree)
        if channel is not None:
            channel.put(wire.STOP)
            channel.close(timeout)
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        if self._answers is not None:
            self._answers.join(timeout)
