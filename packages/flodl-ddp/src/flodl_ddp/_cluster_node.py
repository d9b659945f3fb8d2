"""The node agent ``fdl @cluster`` starts on each worker: torchrun, bound to one interface.

``python -m flodl_ddp._cluster_node --name=NAME [--ifname=IF] [--host-rendezvous]
[--join-timeout=S] TORCHRUN_OPTIONS -- COMMAND...`` (built by ``flodl_cli.cluster``; torchrun's
static rendezvous options). It exports the run token read from stdin's first line as
``FLODL_CLUSTER_TOKEN`` (empty: no admission), hands ``--ifname``'s IPv4 address to torchrun as
``--local-addr``, with ``--host-rendezvous`` opens the rendezvous store on ``HOST:PORT`` alone
(shared by torchrun and every rank: ARCHITECTURE-NOTES.md, ``_cluster_node``), puts this
interpreter's ``bin`` first on ``PATH`` and exits with the failing rank's code. When stdin closes
(the launcher stops it, or ssh dropped) it SIGTERMs torchrun and SIGKILLs what is left
:data:`STOP_GRACE_S` later (a rank blocked on a dead link): nothing is left behind.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

from flodl_core import ConfigError

from ._elastic import interface_address
from ._store import listen_store

PYTHONS = ("python", "python3", f"python3.{sys.version_info.minor}")
STOP_GRACE_S = 3.0  # after stdin closes: SIGTERM torchrun, then SIGKILL what is left
_KEEP: list[Any] = []  # stores must outlive main()'s locals while torchrun runs


def bound_store(addr: str, port: int, timeout_s: float) -> Any:
    """A ``TCPStore`` server listening on ``addr:port`` only (not on every interface)."""
    try:
        store = listen_store(addr, port, timeout_s=timeout_s, multi_tenant=True)
    except OSError as e:
        raise SystemExit(
            f"fdl cluster: cannot listen on {addr}:{port} on {socket.gethostname()} "
            f"({e.strerror}); cluster.controller.host must be an address of the first worker "
            "and the port free"
        ) from None
    _KEEP.append(store)
    return store


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc): torchrun starts its ranks in their own sessions,
    so a signal to our process group does not reach them."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        out += (found := children.get(todo.pop(), []))
        todo += found
    return out


def _watch_stdin() -> None:
    """Stop torchrun (and so its ranks) once stdin closes; SIGKILL what is left after a grace."""
    with contextlib.suppress(Exception):
        while sys.stdin.buffer.readline():
            pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(STOP_GRACE_S)
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os._exit(128 + signal.SIGTERM)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
    """The agent's options, torchrun's options and the command."""
    if "--" not in argv:
        raise SystemExit("fdl cluster: usage: ... -- COMMAND (the command to run on the worker)")
    i = argv.index("--")
    p = argparse.ArgumentParser(prog="python -m flodl_ddp._cluster_node")
    p.add_argument("--name", required=True)
    p.add_argument("--ifname")
    p.add_argument("--host-rendezvous", action="store_true")
    p.add_argument("--join-timeout", type=float, default=300.0)
    p.add_argument("--rdzv-endpoint", required=True)
    known, torchrun = p.parse_known_args(argv[:i])
    torchrun.append(f"--rdzv-endpoint={known.rdzv_endpoint}")
    return known, torchrun, argv[i + 1 :]


def torchrun_extra(join_timeout: float, local_addr: str | None) -> list[str]:
    """The options the agent adds to the launcher's: the join window (whole seconds),
    ``--no-python`` (the command is a full argv) and ``--local-addr``."""
    extra = [f"--rdzv-conf=timeout={max(1, math.ceil(join_timeout))}", "--no-python"]
    return [*extra, f"--local-addr={local_addr}"] if local_addr else extra


def path_with_bin(path: str | None, executable: str = sys.executable) -> str:
    """``PATH`` with ``executable``'s folder first: the worker's configured interpreter is the
    ``python`` (and ``torchrun``) a command line finds."""
    bindir = os.path.dirname(executable)
    rest = [p for p in (path or "").split(os.pathsep) if p and p != bindir]
    return os.pathsep.join([bindir, *rest])


def _split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    opts, torchrun, command = parse(list(sys.argv[1:] if argv is None else argv))
    os.environ.pop("FLODL_CLUSTER_TOKEN", None)
    if token := sys.stdin.readline().strip():
        os.environ["FLODL_CLUSTER_TOKEN"] = token
    os.environ["FLODL_CLUSTER_HOST"] = opts.name
    threading.Thread(target=_watch_stdin, name="fdl-cluster-stdin", daemon=True).start()

    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    host, port = _split_endpoint(opts.rdzv_endpoint)
    try:
        local_addr = interface_address(opts.ifname, "socket_ifname") if opts.ifname else None
    except ConfigError as e:
        raise SystemExit(f"fdl cluster: {e}") from None
    if opts.host_rendezvous:  # torchrun's static rendezvous shares its server (multi_tenant)
        bound_store(host, port, opts.join_timeout)
    os.environ["PATH"] = path_with_bin(os.environ.get("PATH"))
    if command and command[0] in PYTHONS:
        command = [sys.executable, *command[1:]]  # the interpreter that has flodl and torch
    extra = torchrun_extra(opts.join_timeout, local_addr)
    try:
        run(get_args_parser().parse_args([*torchrun, *extra, *command]))
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        code = failure.exitcode
        print(f"fdl cluster: rank {rank} on {opts.name} failed (exit code {code})", file=sys.stderr)
        return code if code and code > 0 else 1
    except SignalException as e:
        return 128 + int(e.sigval)
    except Exception as e:
        print(f"fdl cluster: {opts.name}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except SystemExit as e:  # a refusal ends like any other exit: the stdin thread holds a lock
        # as the interpreter reads it: None is 0, an int is the code, anything else is printed, 1
        code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # no interpreter teardown: the stores' threads need no orderly goodbye
