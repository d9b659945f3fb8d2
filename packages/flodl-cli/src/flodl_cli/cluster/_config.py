"""``fdl.cluster.yml``: the machines of a cluster, as validated dataclasses.

The file (every key but ``controller.host`` and ``workers[].host`` is optional)::

    cluster:
      controller:
        host: 10.0.0.1        # the first worker's address on the cluster network
        port: 1337            # rendezvous port; the rendezvous listens on host:port only
        join_timeout: 300     # seconds the workers have to join
      transport: ssh          # ssh (default) or local (every worker on this machine)
      env: {OMP_NUM_THREADS: 1}
      data_path: /mnt/data    # shared data: fdl probe @cluster checks it is the same everywhere
      workers:
        - host: alpha                         # a name: prefixes the worker's output
          ssh: me@alpha.lan                   # or {target, port, user, identity_file, options}
          devices: [cuda:0, cuda:1]           # or a count of CPU ranks, or "all" (every GPU)
          socket_ifname: eth1                 # the interface gloo/NCCL and the rendezvous use
          path: ~/project                     # working directory of the command (~: the worker's)
          python: ~/venv/bin/python           # ~ is the home of the user on the worker
          env: {DATA: /data}
          data_path: /data                    # this worker mounts the shared data elsewhere

One rank per device. The first worker hosts the rendezvous (torchrun's static rendezvous: the
node ranks follow the worker order). This module imports no torch and nothing of flodl-ddp:
the controller needs neither; only the workers run flodl-ddp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import CliError

CLUSTER_FILES = ("fdl.cluster.yml", "fdl.cluster.yaml")
DEFAULT_PORT = 1337
DEFAULT_JOIN_TIMEOUT = 300.0
DEFAULT_PYTHON = "python3"
TRANSPORTS = ("ssh", "local")


class ClusterConfigError(CliError, ValueError):
    """A cluster file (or :class:`ClusterBuilder`) that does not validate; the message names the
    file, the key path and what was expected. ``fdl`` prints it as one ``fdl: error:`` line."""


@dataclass(frozen=True)
class SshTarget:
    """How to reach a worker over ssh (``ssh [-p port] [-i identity_file] [-o ...] target``)."""

    target: str
    port: int | None = None
    identity_file: str | None = None
    options: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerConfig:
    """Where the rendezvous listens: ``host`` (an address of the first worker) and ``port``."""

    host: str
    port: int = DEFAULT_PORT
    join_timeout: float = DEFAULT_JOIN_TIMEOUT

    @property
    def endpoint(self) -> str:
        """``host:port`` (IPv6 addresses in brackets), as torchrun's ``--rdzv-endpoint``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class WorkerConfig:
    """One machine: its name, how to reach it, its devices, interface and environment."""

    host: str
    ssh: SshTarget | None = None
    devices: tuple[str, ...] | None = ("cpu",)  # None: every GPU of the machine ("all")
    socket_ifname: str | None = None
    path: str | None = None
    python: str = DEFAULT_PYTHON
    env: dict[str, str] = field(default_factory=dict)
    netns: str | None = None
    data_path: str | None = None  # None: the cluster's data_path

    @property
    def nproc(self) -> str:
        """torchrun's ``--nproc-per-node``: the device count, or ``gpu`` for "all"."""
        return "gpu" if self.devices is None else str(len(self.devices))

    @property
    def cuda_visible(self) -> str | None:
        """``CUDA_VISIBLE_DEVICES`` for a worker that names its GPUs, else None."""
        if not self.devices or not self.devices[0].startswith("cuda"):
            return None
        return ",".join(d.split(":")[1] for d in self.devices)


@dataclass(frozen=True)
class ClusterConfig:
    """A validated ``fdl.cluster.yml`` (module docstring). Build it with :meth:`load`,
    :meth:`from_dict` or a :class:`ClusterBuilder`."""

    controller: ControllerConfig
    workers: tuple[WorkerConfig, ...]
    transport: str = "ssh"
    env: dict[str, str] = field(default_factory=dict)
    source: str = "<dict>"
    data_path: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> ClusterConfig:
        """Read and validate a cluster file; errors name the file (and line, for YAML errors),
        the key path and what is expected. YAML anchors and aliases are refused before anything
        is expanded."""
        from ._yaml import load_plain_yaml

        p = Path(path)
        return cls.from_dict(load_plain_yaml(p), source=str(p))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<dict>") -> ClusterConfig:
        """Validate an already parsed document (``{"cluster": {...}}``)."""
        from ._validate import Validator

        return Validator(source).document(data)

    @property
    def world_size(self) -> int | None:
        """Total ranks, or None when a worker uses ``devices: all`` (known only there)."""
        if any(w.devices is None for w in self.workers):
            return None
        return sum(len(w.devices or ()) for w in self.workers)

    def worker(self, host: str) -> WorkerConfig:
        for w in self.workers:
            if w.host == host:
                return w
        raise ClusterConfigError(f"{self.source}: no worker named {host!r}")

    def data_path_of(self, w: WorkerConfig) -> str | None:
        """Where worker ``w`` holds the shared data: its own ``data_path``, else the cluster's."""
        return w.data_path or self.data_path

    def to_dict(self) -> dict[str, Any]:
        """The document :meth:`from_dict` reads back into an equal config (defaults left out)."""
        c: dict[str, Any] = {"controller": _controller_dict(self.controller)}
        if self.transport != "ssh":
            c["transport"] = self.transport
        if self.env:
            c["env"] = dict(self.env)
        if self.data_path is not None:
            c["data_path"] = self.data_path
        c["workers"] = [_worker_dict(w) for w in self.workers]
        return {"cluster": c}


def _controller_dict(c: ControllerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"host": c.host}
    if c.port != DEFAULT_PORT:
        out["port"] = c.port
    if c.join_timeout != DEFAULT_JOIN_TIMEOUT:
        out["join_timeout"] = c.join_timeout
    return out


def ssh_doc(s: SshTarget) -> str | dict[str, Any]:
    """``s`` as the file writes it: the bare target, or the mapping when it has more."""
    if (s.port, s.identity_file, s.options) == (None, None, ()):
        return s.target
    out: dict[str, Any] = {"target": s.target}
    if s.port is not None:
        out["port"] = s.port
    if s.identity_file is not None:
        out["identity_file"] = s.identity_file
    if s.options:
        out["options"] = list(s.options)
    return out


def _worker_dict(w: WorkerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {"host": w.host}
    if w.ssh is not None:
        out["ssh"] = ssh_doc(w.ssh)
    if w.devices is None:
        out["devices"] = "all"
    elif w.devices != ("cpu",):
        cpu = all(d == "cpu" for d in w.devices)
        out["devices"] = len(w.devices) if cpu else list(w.devices)
    optional = {
        "socket_ifname": w.socket_ifname,
        "path": w.path,
        "python": None if w.python == DEFAULT_PYTHON else w.python,
        "env": dict(w.env) or None,
        "netns": w.netns,
        "data_path": w.data_path,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    return out


def find_cluster_file(start: str | Path | None = None) -> Path | None:
    """``fdl.cluster.yml`` (or ``.yaml``) in ``start`` (default: cwd) or its ancestors."""
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        for name in CLUSTER_FILES:
            if (d / name).is_file():
                return d / name
    return None
