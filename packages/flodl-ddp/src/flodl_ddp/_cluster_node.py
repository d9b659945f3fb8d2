"""The node agent ``fdl @cluster`` starts on each worker: torchrun, bound to one interface.

``python -m flodl_ddp._cluster_node --name=NAME [--ifname=IF] [--host-rendezvous]
[--join-timeout=S] TORCHRUN_OPTIONS -- COMMAND...`` (built by the controller,
``flodl_cli.cluster``; TORCHRUN_OPTIONS use torchrun's static rendezvous: ``--nnodes``,
``--node-rank``, ``--rdzv-backend=static``, ``--rdzv-endpoint=HOST:PORT``). The agent:

1. reads the run token from the first line of standard input and exports it to the ranks as
   ``FLODL_CLUSTER_TOKEN`` (an empty line: no admission);
2. hands the IPv4 address of ``--ifname`` to torchrun as ``--local-addr`` (a clear error when
   the interface is missing); ``GLOO_SOCKET_IFNAME`` is set by the launcher;
3. with ``--host-rendezvous`` (node rank 0), opens the rendezvous store on ``HOST:PORT`` alone
   before torchrun starts (a ``TCPStore`` on a socket bound to that address, ``multi_tenant``):
   torchrun's static rendezvous and every rank share that one server, so nothing listens on
   another interface (ARCHITECTURE-NOTES.md, ``_cluster_node``); nothing of torch is patched;
4. puts this interpreter's ``bin`` folder first on ``PATH`` (a command line's ``python`` and
   ``torchrun`` are the worker's configured ones), runs torchrun in this process and exits with
   the failing rank's exit code;
5. when standard input closes (how the launcher stops a worker; also a dropped ssh connection)
   SIGTERMs torchrun, which terminates its ranks, and SIGKILLs whatever is left 3 s later (a rank
   blocked in a collective over a dead link), so nothing is left behind.
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

from ._elastic import interface_names, ipv4_address
from ._store import listen_store

PYTHONS = ("python", "python3", f"python3.{sys.version_info.minor}")
STOP_GRACE_S = 3.0  # after stdin closes: SIGTERM torchrun, then SIGKILL what is left
_KEEP: list[Any] = []  # stores must outlive main()'s locals while torchrun runs


def interface_address(ifname: str) -> str:
    """The IPv4 address of interface ``ifname``; an error naming the interfaces there."""
    names = interface_names()
    if ifname not in names:
        raise SystemExit(
            f"fdl cluster: interface {ifname!r} (socket_ifname) is not present on "
            f"{socket.gethostname()}; interfaces here: {', '.join(names)}"
        )
    try:
        return ipv4_address(ifname)
    except OSError:
        raise SystemExit(
            f"fdl cluster: interface {ifname!r} has no IPv4 address on "
            f"{socket.gethostname()}; give it one or name another socket_ifname"
        ) from None


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
        found = children.get(todo.pop(), [])
        out += found
        todo += found
    return out


def _watch_stdin() -> None:
    with contextlib.suppress(Exception):
        while sys.stdin.buffer.readline():
            pass
    # The launcher closed our stdin (or its connection dropped): stop torchrun, which stops its
    # ranks; a rank stuck in a collective over a dead link gets SIGKILL after a grace period.
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(STOP_GRACE_S)
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os._exit(128 + signal.SIGTERM)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], list[str]]:
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
    """The options the agent adds to the launcher's: the join window (static rendezvous:
    ``timeout``, whole seconds), ``--no-python`` (the command is a full argv) and
    ``--local-addr``."""
    extra = [f"--rdzv-conf=timeout={max(1, math.ceil(join_timeout))}", "--no-python"]
    if local_addr:
        extra.append(f"--local-addr={local_addr}")
    return extra


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
    local_addr = interface_address(opts.ifname) if opts.ifname else None
    if opts.host_rendezvous:
        # torchrun's static rendezvous on this node shares this store's server (multi_tenant).
        bound_store(host, port, opts.join_timeout)
    os.environ["PATH"] = path_with_bin(os.environ.get("PATH"))
    if command and command[0] in PYTHONS:
        command = [sys.executable, *command[1:]]  # the interpreter that has flodl and torch
    extra = torchrun_extra(opts.join_timeout, local_addr)
    args = get_args_parser().parse_args([*torchrun, *extra, *command])
    try:
        run(args)
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
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the stores' threads need no orderly goodbye.
    os._exit(code)
