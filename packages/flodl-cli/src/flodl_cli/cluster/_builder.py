"""``ClusterBuilder``: a cluster described in code, key for key the same as ``fdl.cluster.yml``.

::

    cluster = (
        ClusterBuilder()
        .controller("10.0.0.1", port=29400)
        .env(OMP_NUM_THREADS=4)
        .worker("alpha", ssh="me@alpha.lan", devices=["cuda:0", "cuda:1"], socket_ifname="eth1")
        .worker("beta", ssh="me@beta.lan", devices=["cuda:0"], socket_ifname="eth1")
        .build()  # a ClusterConfig; or .write("fdl.cluster.yml")
    )

The builder records the document the file would hold and validates it with the file's own
validator, so it accepts and refuses exactly what the file does, with the same messages (the
source is ``ClusterBuilder`` instead of the file name). Wherever a :class:`ClusterConfig` is
taken (:func:`run_cluster`, :func:`probe_cluster`, :func:`plan`), a builder is too.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, TypeAlias

from ._config import ClusterConfig, ClusterConfigError, SshTarget, ssh_doc

SOURCE = "ClusterBuilder"


class ClusterBuilder:
    """Records a cluster document (module docstring); :meth:`build` validates it."""

    def __init__(self) -> None:
        self._cluster: dict[str, Any] = {}
        self._workers: list[dict[str, Any]] = []

    def controller(
        self, host: str, *, port: int | None = None, join_timeout: float | None = None
    ) -> ClusterBuilder:
        """``cluster.controller``: the first worker's address on the cluster network, the
        rendezvous port (default 1337) and the seconds the workers have to join (default 300)."""
        c: dict[str, Any] = {"host": host}
        if port is not None:
            c["port"] = port
        if join_timeout is not None:
            c["join_timeout"] = join_timeout
        self._cluster["controller"] = c
        return self

    def transport(self, name: str) -> ClusterBuilder:
        """``cluster.transport``: ``ssh`` (default) or ``local`` (every worker on this machine)."""
        self._cluster["transport"] = name
        return self

    def env(self, values: dict[str, Any] | None = None, **more: Any) -> ClusterBuilder:
        """``cluster.env``: variables set on every worker (merged over those set before)."""
        self._cluster.setdefault("env", {}).update({**(values or {}), **more})
        return self

    def data_path(self, path: str) -> ClusterBuilder:
        """``cluster.data_path``: the shared data, which ``fdl probe @cluster`` compares."""
        self._cluster["data_path"] = path
        return self

    def worker(
        self,
        host: str,
        *,
        ssh: str | SshTarget | dict[str, Any] | None = None,
        devices: list[str] | tuple[str, ...] | int | str | None = None,
        socket_ifname: str | None = None,
        path: str | None = None,
        python: str | None = None,
        env: dict[str, Any] | None = None,
        netns: str | None = None,
        data_path: str | None = None,
    ) -> ClusterBuilder:
        """One ``cluster.workers`` entry; arguments left at None are left out of the document
        (the file's defaults apply). ``devices``: a list (``["cuda:0", "cuda:1"]``), a number
        of CPU ranks, or ``"all"``; ``ssh``: ``"user@host"``, a mapping of the file's ssh keys,
        or an :class:`SshTarget`."""
        w: dict[str, Any] = {"host": host}
        if isinstance(ssh, SshTarget):
            ssh = ssh_doc(ssh)
        if isinstance(devices, tuple):
            devices = list(devices)
        given = {
            "ssh": ssh,
            "devices": devices,
            "socket_ifname": socket_ifname,
            "path": path,
            "python": python,
            "env": env,
            "netns": netns,
            "data_path": data_path,
        }
        w.update({k: copy.deepcopy(v) for k, v in given.items() if v is not None})
        self._workers.append(w)
        return self

    def to_dict(self) -> dict[str, Any]:
        """The document as recorded so far (``{"cluster": {...}}``), before validation."""
        c = copy.deepcopy(self._cluster)
        c["workers"] = copy.deepcopy(self._workers)
        return {"cluster": c}

    def build(self) -> ClusterConfig:
        """The validated :class:`ClusterConfig`.

        Raises:
            ClusterConfigError: what the file loader would say about the same document.
        """
        return ClusterConfig.from_dict(self.to_dict(), source=SOURCE)

    def write(self, path: str | Path) -> ClusterConfig:
        """Validate, then write the cluster file (atomically: a temporary file renamed over
        ``path``); returns the config, which :meth:`ClusterConfig.load` reads back equal."""
        import yaml

        cfg = self.build()
        p = Path(path)
        text = "# written by flodl_cli.cluster.ClusterBuilder\n" + yaml.safe_dump(
            cfg.to_dict(), sort_keys=False, default_flow_style=False
        )
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, p)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise ClusterConfigError(f"cannot write cluster file {p}: {e.strerror}") from None
        return ClusterConfig.load(p)


ClusterLike: TypeAlias = "ClusterConfig | ClusterBuilder"


def as_config(cluster: ClusterLike) -> ClusterConfig:
    """A :class:`ClusterConfig` from a config (as is) or a builder (built, so validated)."""
    if isinstance(cluster, ClusterBuilder):
        return cluster.build()
    if isinstance(cluster, ClusterConfig):
        return cluster
    raise TypeError(
        f"expected a ClusterConfig or a ClusterBuilder, got {type(cluster).__name__}; "
        "load a file with ClusterConfig.load(path)"
    )
