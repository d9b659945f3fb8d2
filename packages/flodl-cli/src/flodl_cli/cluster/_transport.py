"""How a command reaches a worker: over ssh (the default) or on this machine (``local``).

A transport turns "run this argv with this environment in this directory on that worker" into
the argv of a local process. Nothing secret ever goes into that argv: the run token travels on
the process's standard input (see :func:`run_cluster`).

A ``~`` at the head of the worker's ``python`` and ``path`` means the home of the user the
command runs as *on the worker*: over ssh it is left for the remote shell to expand (never
expanded here, where it would be the controller's home); on the local transport, the worker is
this machine, so it is expanded here.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ._config import WorkerConfig

if TYPE_CHECKING:
    from ._builder import ClusterLike

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


def home_quote(word: str) -> str:
    """``word`` quoted for a POSIX shell, except that a leading ``~`` or ``~/`` stays unquoted,
    so the shell that runs the line expands it to its own user's home."""
    if word == "~":
        return "~"
    if word.startswith("~/"):
        return "~/" + shlex.quote(word[2:]) if len(word) > 2 else "~/"
    return shlex.quote(word)


def remote_line(worker: WorkerConfig, argv: list[str], env: dict[str, str]) -> str:
    """The shell line a remote login shell runs: ``cd PATH && exec env K=V ... PROGRAM ARGS``.

    The program (``argv[0]``, the worker's ``python``) and ``path`` keep a leading ``~``
    unquoted, so it is the remote user's home; every other word is quoted as it is.
    """
    if not argv:
        raise ValueError("remote_line: empty argv")
    words = [home_quote(argv[0]), *(shlex.quote(a) for a in argv[1:])]
    if env:
        words = ["env", *(shlex.quote(f"{k}={v}") for k, v in env.items()), *words]
    line = "exec " + " ".join(words)
    if worker.path:
        line = f"cd {home_quote(worker.path)} && {line}"
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
        # This machine is the worker: its home is the worker's home.
        argv = [os.path.expanduser(argv[0]), *argv[1:]] if argv else []
        full = ["ip", "netns", "exec", worker.netns, *argv] if worker.netns else argv
        cwd = os.path.expanduser(worker.path) if worker.path else None
        return Spawn(full, dict(os.environ, **env), cwd)


def transport_for(cluster: ClusterLike) -> Transport:
    """The transport the cluster file asks for (``cluster.transport``)."""
    from ._builder import as_config

    return LocalTransport() if as_config(cluster).transport == "local" else SshTransport()
