"""``fdl @cluster COMMAND``: one ``torchrun`` per worker, output fanned in, first failure wins.

For every worker the launcher starts, through the transport, flodl-ddp's node agent
(``python -m flodl_ddp._cluster_node``, which every worker has installed) with that worker's
torchrun options: ``--nnodes`` (the number of workers), ``--node-rank`` (its place in the file),
``--nproc-per-node`` (its devices) and torchrun's static rendezvous at ``controller.host:port``.
The first worker's agent hosts that rendezvous store, bound to the controller address alone,
and the ranks of every worker use the same store. Each worker's environment gets the cluster's
and the worker's ``env``, ``GLOO_SOCKET_IFNAME``/``NCCL_SOCKET_IFNAME`` from ``socket_ifname``
and ``CUDA_VISIBLE_DEVICES`` from its GPUs. The run token goes to each agent on its standard
input (first line) and never appears in an argv, an environment passed to ssh, or the output.

Every line a worker prints comes back prefixed with its name. When a worker exits non-zero, the
others are stopped (their agent's standard input is closed, which makes it stop torchrun; then
SIGTERM, then SIGKILL) and the launcher returns that first failure's exit code.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

from ._builder import ClusterLike, as_config
from ._config import ClusterConfig, WorkerConfig
from ._transport import Spawn, Transport, transport_for

NODE_AGENT = "flodl_ddp._cluster_node"  # what the workers run: flodl-ddp's torchrun agent
STOP_GRACE_S = 5.0  # after closing an agent's stdin, wait this long before SIGTERM
KILL_GRACE_S = 3.0  # after SIGTERM, wait this long before SIGKILL


@dataclass(frozen=True)
class NodeLaunch:
    """What one worker runs: the agent's argv and the environment set on the worker."""

    worker: WorkerConfig
    node_rank: int
    argv: list[str]
    env: dict[str, str]


def torchrun_options(cfg: ClusterConfig, node_rank: int, run_id: str) -> list[str]:
    """The torchrun options of worker ``node_rank`` (what the node agent hands to torchrun).

    The static rendezvous: the node ranks are the workers' order in the file, and the first
    worker's store (bound to ``controller.host`` by its agent) is the only one the run opens.
    """
    w = cfg.workers[node_rank]
    return [
        f"--nnodes={len(cfg.workers)}",
        f"--node-rank={node_rank}",
        f"--nproc-per-node={w.nproc}",
        "--rdzv-backend=static",
        f"--rdzv-endpoint={cfg.controller.endpoint}",
        f"--rdzv-id={run_id}",
        "--max-restarts=0",
    ]


def worker_env(cfg: ClusterConfig, w: WorkerConfig) -> dict[str, str]:
    """The environment set on worker ``w`` (the cluster's, then the worker's own on top)."""
    env = {"PYTHONUNBUFFERED": "1", **cfg.env, **w.env}
    if w.socket_ifname:
        env.setdefault("GLOO_SOCKET_IFNAME", w.socket_ifname)
        env.setdefault("NCCL_SOCKET_IFNAME", w.socket_ifname)
    visible = w.cuda_visible
    if visible is not None:
        env.setdefault("CUDA_VISIBLE_DEVICES", visible)
    return env


def plan(
    cluster: ClusterLike,
    command: list[str],
    run_id: str,
    env: Mapping[str, str] | None = None,
) -> list[NodeLaunch]:
    """One :class:`NodeLaunch` per worker, in worker order; ``env`` is set on every worker on top
    of the cluster file's (e.g. ``FDL_CONFIG`` of an fdl.yml preset)."""
    if not command:
        raise ValueError("command is empty; e.g. fdl @cluster python train.py")
    cfg = as_config(cluster)
    out = []
    for i, w in enumerate(cfg.workers):
        argv = [w.python, "-m", NODE_AGENT, f"--name={w.host}"]
        argv.append(f"--join-timeout={cfg.controller.join_timeout:g}")
        if w.socket_ifname:
            argv.append(f"--ifname={w.socket_ifname}")
        if i == 0:
            argv.append("--host-rendezvous")
        argv += [*torchrun_options(cfg, i, run_id), "--", *command]
        out.append(NodeLaunch(w, i, argv, {**worker_env(cfg, w), **(env or {})}))
    return out


def new_run_id() -> str:
    """A fresh rendezvous id (torchrun's ``--rdzv-id``)."""
    return "fdl-" + secrets.token_hex(6)


def new_token() -> str:
    """A fresh per-run token: 32 random bytes as 64 hex digits (the ranks prove it to rank 0
    through flodl-ddp's admission, reading it from ``FLODL_CLUSTER_TOKEN``)."""
    return secrets.token_hex(32)


class _Node:
    """One running worker: its process, its output reader, and how to stop it."""

    def __init__(self, launch: NodeLaunch, spawn: Spawn, token: str, out: _Out) -> None:
        self.launch = launch
        self.name = launch.worker.host
        self.stopped = False
        self.proc = subprocess.Popen(
            spawn.argv,
            env=spawn.env,
            cwd=spawn.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C goes to fdl, which stops the workers in order
        )
        assert self.proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write(token.encode() + b"\n")
            self.proc.stdin.flush()
        self.reader = threading.Thread(target=out.pump, args=(self.name, self.proc), daemon=True)
        self.reader.start()

    def close_stdin(self) -> None:
        with contextlib.suppress(Exception):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)


class _Out:
    """Writes each worker's lines as ``name | line``, whole lines only, one writer at a time."""

    def __init__(self, stream: IO[str], names: list[str]) -> None:
        self.stream = stream
        self.width = max(len(n) for n in [*names, "fdl"])  # "fdl" prefixes the launcher's lines
        self.lock = threading.Lock()

    def line(self, name: str, text: str) -> None:
        with self.lock:
            self.stream.write(f"{name:<{self.width}} | {text}\n")
            self.stream.flush()

    def pump(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self.line(name, raw.decode(errors="replace").rstrip("\r\n"))
        proc.stdout.close()


def run_cluster(
    cluster: ClusterLike,
    command: list[str],
    *,
    transport: Transport | None = None,
    out: IO[str] | None = None,
    token: str | None = None,
    run_id: str | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` on every worker of ``cluster`` (a :class:`ClusterConfig` or a
    :class:`ClusterBuilder`; module docstring) with ``env`` added to each worker's environment;
    returns the exit status: 0 when every worker succeeded, else the first failing worker's exit
    code."""
    cfg = as_config(cluster)
    transport = transport or transport_for(cfg)
    stream = out or sys.stdout
    launches = plan(cfg, command, run_id or new_run_id(), env)
    printer = _Out(stream, [n.worker.host for n in launches])
    token = token or new_token()
    nodes: list[_Node] = []
    try:
        for n in launches:
            nodes.append(_Node(n, transport.spawn(n.worker, n.argv, n.env), token, printer))
        return _supervise(nodes, printer)
    except KeyboardInterrupt:
        printer.line("fdl", "interrupted: stopping every worker")
        _stop(nodes)
        return 130
    finally:
        _stop(nodes)
        for node in nodes:
            node.close_stdin()
            node.reader.join(5.0)


def _supervise(nodes: list[_Node], printer: _Out) -> int:
    while True:
        codes = [n.proc.poll() for n in nodes]
        for n, code in zip(nodes, codes, strict=True):
            if code not in (None, 0):
                printer.line(
                    "fdl", f"{n.name} failed with exit code {code}: stopping the other workers"
                )
                _stop([m for m in nodes if m is not n])
                return int(code) if code > 0 else 128 - int(code)  # a signal: 128 + signum
        if all(c == 0 for c in codes):
            return 0
        time.sleep(0.05)


def _stop(nodes: list[_Node]) -> None:
    """Stop running workers: close stdin (the agent stops torchrun), then SIGTERM, then SIGKILL."""
    running = [n for n in nodes if n.proc.poll() is None]
    for n in running:
        n.close_stdin()
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        deadline = time.monotonic() + grace
        for n in running:
            with contextlib.suppress(subprocess.TimeoutExpired):
                n.proc.wait(max(0.0, deadline - time.monotonic()))
        running = [n for n in running if n.proc.poll() is None]
        for n in running:
            n.signal(sig)
    for n in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            n.proc.wait(5.0)
