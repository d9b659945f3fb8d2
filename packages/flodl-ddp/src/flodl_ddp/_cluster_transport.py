"""How a command reaches a worker: over ssh (the default) or on this machine (``local``).

A transport turns "run this argv with this environment in this directory on that worker" into
the argv of a local process. Nothing secret ever goes into that argv: the run token travels on
the process's standard input (see :mod:`flodl_ddp._cluster_launch`).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Protocol

from ._cluster_config import ClusterConfig, WorkerConfig

# Never prompt (a prompt would hang the fan-out), and give up on a dead host quickly.
SSH_DEFAULT_OPTIONS = ("BatchMode=yes", "ConnectTimeout=10", "ServerAliveInterval=15")


@dataclass(frozen=True)
class Spawn:
    """A local process to start: ``argv``, its environment (None: inherit) and directory."""

    argv: list[str]
    env: dict[str, str] | None = None
    cwd: str | None = None


class Transport(Protocol):
    """Builds the local process that runs ``argv`` on ``worker`` with ``env`` set there."""

    name: str

    def spawn(self, worker: WorkerConfig, argv: list[str], env: dict[str, str]) -> Spawn: ...


def remote_line(worker: WorkerConfig, argv: list[str], env: dict[str, str]) -> str:
    """The shell line a remote login shell runs: ``cd PATH && exec env K=V ... ARGV``."""
    assigns = [f"{k}={v}" for k, v in env.items()]
    run = shlex.join(["env", *assigns, *argv]) if assigns else shlex.join(argv)
    line = f"exec {run}"
    if worker.path:
        # A leading ~ stays unquoted so the remote shell expands it.
        path = worker.path
        if path == "~" or path.startswith("~/"):
            quoted = "~" + (shlex.quote(path[1:]) if len(path) > 1 else "")
        else:
            quoted = shlex.quote(path)
        line = f"cd {quoted} && {line}"
    return line


class SshTransport:
    """``ssh -T -o BatchMode=yes [-p PORT] [-i KEY] [-o OPT]... -- TARGET 'cd PATH && ...'``."""

    name = "ssh"

    def __init__(self, ssh: str = "ssh") -> None:
        self.ssh = ssh

    def argv(self, worker: WorkerConfig, argv: list[str], env: dict[str, str]) -> list[str]:
        target = worker.ssh.target if worker.ssh else worker.host
        out = [self.ssh, "-T"]
        for opt in SSH_DEFAULT_OPTIONS:
            out += ["-o", opt]
        if worker.ssh is not None:
            if worker.ssh.port is not None:
                out += ["-p", str(worker.ssh.port)]
            if worker.ssh.identity_file is not None:
                out += ["-i", os.path.expanduser(worker.ssh.identity_file)]
            for opt in worker.ssh.options:
                out += ["-o", opt]
        # "--" first: a target can never be read as an ssh option.
        return [*out, "--", target, remote_line(worker, argv, env)]

    def spawn(self, worker: WorkerConfig, argv: list[str], env: dict[str, str]) -> Spawn:
        return Spawn(self.argv(worker, argv, env))


class LocalTransport:
    """Runs every worker on this machine, inside ``ip netns exec NETNS`` when the worker names a
    network namespace: a whole cluster on one machine, for trying a cluster file out."""

    name = "local"

    def spawn(self, worker: WorkerConfig, argv: list[str], env: dict[str, str]) -> Spawn:
        full = ["ip", "netns", "exec", worker.netns, *argv] if worker.netns else list(argv)
        return Spawn(full, dict(os.environ, **env), worker.path)


def transport_for(cfg: ClusterConfig) -> Transport:
    """The transport the cluster file asks for (``cluster.transport``)."""
    return LocalTransport() if cfg.transport == "local" else SshTransport()
