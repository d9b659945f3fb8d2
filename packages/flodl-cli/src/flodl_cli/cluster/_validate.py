"""Validation of a cluster document: one rule per key, each error naming the source, the key
path (``cluster.workers[1].socket_ifname``) and what was expected. :class:`ClusterConfig` and
:class:`ClusterBuilder` both go through here, so they accept and refuse the same things with the
same messages."""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from ._config import (
    DEFAULT_JOIN_TIMEOUT,
    DEFAULT_PORT,
    DEFAULT_PYTHON,
    TRANSPORTS,
    ClusterConfig,
    ClusterConfigError,
    ControllerConfig,
    SshTarget,
    WorkerConfig,
)

_CONTROLLER_KEYS = ("host", "port", "join_timeout")
_CLUSTER_KEYS = ("controller", "transport", "env", "data_path", "workers")
_WORKER_KEYS = (
    "host", "ssh", "devices", "socket_ifname", "path", "python", "env", "netns", "data_path",
)  # fmt: skip
_SSH_KEYS = ("target", "port", "user", "identity_file", "options")
_LEGACY = {
    "master_addr": "cluster.controller.host",
    "master_port": "cluster.controller.port",
    "hosts": "cluster.workers",
    "local_devices": "devices",
    "nccl_socket_ifname": "socket_ifname",
    "ranks": "devices",
}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_IFNAME = re.compile(r"^[^\s/]{1,15}$")  # Linux: at most 15 bytes, no '/' or whitespace
_CUDA = re.compile(r"^cuda:(\d+)$")


class Validator:
    """Checks a parsed cluster document key by key; ``source`` prefixes every message."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, value: Any, expected: str) -> ClusterConfigError:
        return ClusterConfigError(f"{self.source}: {key}: expected {expected}, got {value!r}")

    def mapping(self, key: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
        if not isinstance(value, dict):
            return_type = type(value).__name__
            raise ClusterConfigError(
                f"{self.source}: {key}: expected a mapping, got a {return_type}"
            )
        for k in value:
            if k in _LEGACY:
                raise ClusterConfigError(
                    f"{self.source}: {key}.{k}: an old cluster key; use {_LEGACY[k]} instead"
                )
            if k not in allowed:
                raise ClusterConfigError(
                    f"{self.source}: {key}.{k}: unknown key; expected one of {', '.join(allowed)}"
                )
        return value

    def string(self, key: str, value: Any, what: str = "a non-empty string") -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, value, what)
        return value

    def integer(self, key: str, value: Any, lo: int, hi: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise self.fail(key, value, f"an integer from {lo} to {hi}")
        return value

    def env(self, key: str, value: Any) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, value, "a mapping of variable names to values")
        out: dict[str, str] = {}
        for k, v in value.items():
            if not isinstance(k, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k):
                raise self.fail(f"{key}.{k}", k, "a variable name (letters, digits, _)")
            if k == "FLODL_CLUSTER_TOKEN":
                raise ClusterConfigError(
                    f"{self.source}: {key}.{k}: the run token is generated for every run and "
                    "never stored in a file; remove this entry"
                )
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                raise self.fail(f"{key}.{k}", v, "a string or a number")
            out[k] = str(v)
        return out

    def document(self, data: Any) -> ClusterConfig:
        if not isinstance(data, dict) or "cluster" not in data:
            raise ClusterConfigError(
                f"{self.source}: expected a top-level 'cluster:' mapping with 'controller' and "
                "'workers' (see the cluster file format in docs/cli.md)"
            )
        extra = [k for k in data if k != "cluster"]
        if extra:
            raise ClusterConfigError(
                f"{self.source}: {extra[0]}: unknown top-level key; everything goes under "
                "'cluster:'"
            )
        c = self.mapping("cluster", data["cluster"], _CLUSTER_KEYS)
        if "controller" not in c:
            raise ClusterConfigError(
                f"{self.source}: cluster.controller: missing; expected {{host, port}}"
            )
        controller = self.controller(c["controller"])
        transport = c.get("transport", "ssh")
        if transport not in TRANSPORTS:
            raise self.fail("cluster.transport", transport, f"one of {', '.join(TRANSPORTS)}")
        env = self.env("cluster.env", c.get("env"))
        raw = c.get("workers")
        if not isinstance(raw, list) or not raw:
            raise self.fail("cluster.workers", raw, "a non-empty list of workers")
        workers = tuple(
            self.worker(f"cluster.workers[{i}]", w, transport) for i, w in enumerate(raw)
        )
        seen: set[str] = set()
        for i, w in enumerate(workers):
            if w.host in seen:
                raise ClusterConfigError(
                    f"{self.source}: cluster.workers[{i}].host: {w.host!r} is used twice; "
                    "every worker needs its own name"
                )
            seen.add(w.host)
        if len(workers) > 1:
            for i, w in enumerate(workers):
                if w.socket_ifname is None:
                    raise ClusterConfigError(
                        f"{self.source}: cluster.workers[{i}].socket_ifname: missing; a cluster of "
                        "several machines needs the network interface each one uses (e.g. eth1): "
                        "without it gloo binds what the host name resolves to, often a loopback "
                        "address, and the other machines are refused"
                    )
        data_path = self.data_path("cluster.data_path", c.get("data_path"))
        return ClusterConfig(controller, workers, transport, env, self.source, data_path)

    def controller(self, value: Any) -> ControllerConfig:
        c = self.mapping("cluster.controller", value, _CONTROLLER_KEYS)
        if "host" not in c:
            raise ClusterConfigError(
                f"{self.source}: cluster.controller.host: missing; expected the first worker's "
                "address on the cluster network (e.g. 10.0.0.1)"
            )
        host = self.string("cluster.controller.host", c["host"], "an address or host name")
        try:
            unspecified = ipaddress.ip_address(host).is_unspecified
        except ValueError:
            unspecified = False
        if unspecified:
            raise self.fail(
                "cluster.controller.host",
                host,
                "the address of one interface (the rendezvous listens on it alone), not a "
                "listen-everywhere address",
            )
        port = self.integer("cluster.controller.port", c.get("port", DEFAULT_PORT), 1, 65535)
        timeout = c.get("join_timeout", DEFAULT_JOIN_TIMEOUT)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise self.fail(
                "cluster.controller.join_timeout", timeout, "a positive number of seconds"
            )
        return ControllerConfig(host, port, float(timeout))

    def worker(self, key: str, value: Any, transport: str) -> WorkerConfig:
        w = self.mapping(key, value, _WORKER_KEYS)
        if "host" not in w:
            raise ClusterConfigError(
                f"{self.source}: {key}.host: missing; expected the worker's name"
            )
        host = self.string(f"{key}.host", w["host"])
        if not _NAME.match(host):
            raise self.fail(f"{key}.host", host, "a name of letters, digits, '.', '_' or '-'")
        ssh = self.ssh(f"{key}.ssh", w.get("ssh"), host)
        devices = self.devices(f"{key}.devices", w.get("devices", ["cpu"]))
        ifname = w.get("socket_ifname")
        if ifname is not None and (not isinstance(ifname, str) or not _IFNAME.match(ifname)):
            raise self.fail(f"{key}.socket_ifname", ifname, "a network interface name like eth1")
        path = w.get("path")
        if path is not None:
            path = self.string(f"{key}.path", path, "a directory on the worker")
        python = self.string(f"{key}.python", w.get("python", DEFAULT_PYTHON), "a Python command")
        netns = w.get("netns")
        if netns is not None:
            if transport != "local":
                raise ClusterConfigError(
                    f"{self.source}: {key}.netns: only meaningful with 'transport: local' "
                    "(a network namespace of this machine); remove it or set transport: local"
                )
            if not isinstance(netns, str) or not _NAME.match(netns):
                raise self.fail(f"{key}.netns", netns, "a network namespace name")
        env = self.env(f"{key}.env", w.get("env"))
        data_path = self.data_path(f"{key}.data_path", w.get("data_path"))
        return WorkerConfig(host, ssh, devices, ifname, path, python, env, netns, data_path)

    def data_path(self, key: str, value: Any) -> str | None:
        if value is None:
            return None
        return self.string(key, value, "a path to the shared data on the worker (a folder or file)")

    def ssh(self, key: str, value: Any, host: str) -> SshTarget | None:
        if value is None:
            return None
        if isinstance(value, str):
            return SshTarget(self.string(key, value, "an ssh target like user@host"))
        s = self.mapping(key, value, _SSH_KEYS)
        target = self.string(f"{key}.target", s.get("target", host), "an ssh target")
        user = s.get("user")
        if user is not None:
            user = self.string(f"{key}.user", user, "a user name")
            if "@" in target:
                raise ClusterConfigError(
                    f"{self.source}: {key}.user: the target {target!r} already names a user; "
                    "keep one of them"
                )
            target = f"{user}@{target}"
        port = s.get("port")
        if port is not None:
            port = self.integer(f"{key}.port", port, 1, 65535)
        ident = s.get("identity_file")
        if ident is not None:
            ident = self.string(f"{key}.identity_file", ident, "a path to a private key")
        options = s.get("options", [])
        if not isinstance(options, list) or not all(
            isinstance(o, str) and "=" in o for o in options
        ):
            raise self.fail(f"{key}.options", options, "a list of KEY=VALUE ssh options")
        return SshTarget(target, port, ident, tuple(options))

    def devices(self, key: str, value: Any) -> tuple[str, ...] | None:
        if value == "all":
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            if value < 1:
                raise self.fail(key, value, "a positive number of CPU ranks")
            return ("cpu",) * value
        if not isinstance(value, list) or not value:
            raise self.fail(key, value, "a list like [cpu] or [cuda:0, cuda:1], a count, or 'all'")
        out = []
        for i, d in enumerate(value):
            if d == "cpu" or (isinstance(d, str) and _CUDA.match(d)):
                out.append(d)
            elif d == "cuda":
                out.append("cuda:0")
            else:
                raise self.fail(f"{key}[{i}]", d, "'cpu' or 'cuda:N'")
        kinds = {d.split(":")[0] for d in out}
        if len(kinds) > 1:
            raise self.fail(key, value, "devices of one kind per worker (all cpu or all cuda:N)")
        cudas = [d for d in out if d != "cpu"]
        if len(set(cudas)) != len(cudas):
            raise self.fail(key, value, "each GPU once")
        return tuple(out)
