"""``fdl probe @cluster``: is every worker ready before a launch?

Each worker runs a short torch-free script through the cluster's transport, with the launch's
environment (the same way the launch reaches it), that reports its Python, its torch build,
its flodl packages and its network interfaces. Checks, per worker:

- ``reachable``: the script ran (ssh exit 255 means the machine or its sshd was not reached);
- ``python``: 3.10 or newer (what the flodl packages require), the same minor version everywhere;
- ``torch``: installed, the same version everywhere (the build suffix may differ: +cpu, +cu128);
- ``flodl``: flodl-ddp installed, every flodl package at one version, the same on every worker
  and as on this machine;
- ``interface``: ``socket_ifname`` present, with an IPv4 address;
- ``data``: where the cluster file names a ``data_path``: present, readable, and the same files
  with the same sizes as on the other workers (:mod:`._data`).

Nothing here imports torch: the controller only reads what the workers report.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ._builder import ClusterLike, as_config
from ._config import WorkerConfig
from ._data import DATA_SCRIPT, compare_data, data_check
from ._launch import worker_env
from ._transport import Transport, transport_for

CHECKS = ("reachable", "python", "torch", "flodl", "interface", "data")
MARK = "FDL-PROBE "
MIN_PYTHON = (3, 10)  # the flodl packages' requires-python

# Runs on the worker with its Python: standard library only, no torch import (fast).
PROBE_SCRIPT = (
    r"""
import fcntl, json, platform, socket, struct, sys
import importlib.metadata as md
out = {"python": platform.python_version(), "hostname": socket.gethostname(), "packages": {}}
for d in md.distributions():
    name = (d.metadata["Name"] or "").lower().replace("_", "-")
    if name == "torch" or name.startswith("flodl-"):
        out["packages"][name] = d.version
out["interfaces"] = {}
for _, n in socket.if_nameindex():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            raw = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", n.encode()))
            out["interfaces"][n] = socket.inet_ntoa(raw[20:24])
        except OSError:
            out["interfaces"][n] = None
"""
    + DATA_SCRIPT
    + r"""
print("FDL-PROBE " + json.dumps(out), flush=True)
"""
)


@dataclass
class HostReport:
    """One worker's facts and its checks: ``checks[name] = (ok, detail)``."""

    host: str
    facts: dict[str, Any] = field(default_factory=dict)
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(ok for ok, _ in self.checks.values())


@dataclass
class ProbeReport:
    """Every worker's report; :attr:`failures` lists ``(host, check, detail)``."""

    hosts: list[HostReport]

    @property
    def failures(self) -> list[tuple[str, str, str]]:
        return [
            (h.host, name, detail)
            for h in self.hosts
            for name, (ok, detail) in h.checks.items()
            if not ok
        ]

    @property
    def ok(self) -> bool:
        return not self.failures

    def table(self) -> str:
        """A table: one row per worker, one column per check (``FAIL`` marks a failure)."""
        header = ["host", *CHECKS]
        rows = [header]
        for h in self.hosts:
            row = [h.host]
            for name in CHECKS:
                ok, detail = h.checks.get(name, (False, "not checked"))
                row.append(detail if ok else f"FAIL {detail}")
            rows.append(row)
        widths = [min(40, max(len(r[i]) for r in rows)) for i in range(len(header))]
        lines = ["  ".join(c[:40].ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
        lines = [line.rstrip() for line in lines]
        for host, name, detail in self.failures:
            lines.append(f"FAIL {host}: {name}: {detail}")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(
            {
                "ok": self.ok,
                "hosts": [
                    {
                        "host": h.host,
                        "ok": h.ok,
                        "facts": h.facts,
                        "checks": {n: {"ok": o, "detail": d} for n, (o, d) in h.checks.items()},
                    }
                    for h in self.hosts
                ],
                "failures": [{"host": h, "check": c, "detail": d} for h, c, d in self.failures],
            },
            indent=2,
        )


def _collect(
    transport: Transport,
    w: WorkerConfig,
    env: dict[str, str],
    timeout_s: float,
    data_path: str | None,
) -> tuple[dict[str, Any] | None, str]:
    argv = [w.python, "-c", PROBE_SCRIPT] + ([data_path] if data_path else [])
    spawn = transport.spawn(w, argv, env)
    try:
        proc = subprocess.Popen(
            spawn.argv,
            env=spawn.env,
            cwd=spawn.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # on a timeout the whole group goes, children included
        )
    except OSError as e:
        return None, f"cannot start {spawn.argv[0]}: {e.strerror}"
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None, f"no answer within {timeout_s:g} s"
    done = subprocess.CompletedProcess(spawn.argv, proc.returncode, stdout, stderr)
    for line in done.stdout.decode(errors="replace").splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :]), ""
    err = done.stderr.decode(errors="replace").strip().splitlines()
    last = err[-1] if err else "no output"
    if transport.name == "ssh" and done.returncode == 255:
        return None, f"ssh could not reach it: {last}"
    return None, f"exit code {done.returncode}: {last}"


def _flodl(pkgs: dict[str, str]) -> tuple[bool, str]:
    flodl = {k: v for k, v in pkgs.items() if k.startswith("flodl-")}
    if "flodl-ddp" not in flodl:
        return False, "flodl-ddp not installed"
    versions = sorted(set(flodl.values()))
    if len(versions) > 1:
        return False, "mixed: " + ", ".join(f"{k} {v}" for k, v in sorted(flodl.items()))
    return True, versions[0]


def probe_cluster(
    cluster: ClusterLike,
    *,
    transport: Transport | None = None,
    timeout_s: float = 30.0,
    local_packages: dict[str, str] | None = None,
) -> ProbeReport:
    """Probe every worker of ``cluster`` (a :class:`ClusterConfig` or a
    :class:`ClusterBuilder`) in parallel; ``local_packages`` (this machine's flodl versions)
    joins the version comparison when given. ``timeout_s`` bounds each worker's answer, the
    data listing included."""
    cfg = as_config(cluster)
    transport = transport or transport_for(cfg)

    def ask(w: WorkerConfig) -> tuple[dict[str, Any] | None, str]:
        return _collect(transport, w, worker_env(cfg, w), timeout_s, cfg.data_path_of(w))

    with ThreadPoolExecutor(max_workers=min(16, len(cfg.workers))) as pool:
        answers = list(pool.map(ask, cfg.workers))
    reports = []
    for w, (facts, why) in zip(cfg.workers, answers, strict=True):
        r = HostReport(w.host, facts or {})
        reports.append(r)
        if facts is None:
            r.checks["reachable"] = (False, why)
            continue
        r.checks["reachable"] = (True, "ok")
        py = str(facts.get("python", "?"))
        parts = tuple(int(p) for p in py.split(".")[:2] if p.isdigit())
        ok = parts >= MIN_PYTHON
        r.checks["python"] = (ok, py if ok else f"{py} (< {'.'.join(map(str, MIN_PYTHON))})")
        pkgs = facts.get("packages", {})
        torch_v = pkgs.get("torch")
        r.checks["torch"] = (torch_v is not None, torch_v or "not installed")
        r.checks["flodl"] = _flodl(pkgs)
        if w.socket_ifname is None:
            r.checks["interface"] = (True, "-")
        else:
            ifaces = facts.get("interfaces", {})
            if w.socket_ifname not in ifaces:
                have = ", ".join(ifaces) or "none"
                r.checks["interface"] = (False, f"{w.socket_ifname} missing (have: {have})")
            elif ifaces[w.socket_ifname] is None:
                r.checks["interface"] = (False, f"{w.socket_ifname} has no IPv4 address")
            else:
                r.checks["interface"] = (True, f"{w.socket_ifname} {ifaces[w.socket_ifname]}")
        r.checks["data"] = data_check(facts.get("data"), cfg.data_path_of(w))
    _compare(reports, local_packages)
    compare_data(reports)
    return ProbeReport(reports)


def _compare(reports: list[HostReport], local: dict[str, str] | None) -> None:
    """Cross-host checks: one Python minor, one torch version, one flodl version."""
    live = [r for r in reports if r.checks.get("reachable", (False, ""))[0]]

    def split(name: str, value: Any) -> str:
        text = str(value)
        if name == "python":
            return ".".join(text.split(".")[:2])
        return text.split("+")[0]

    for name, get in (
        ("python", lambda r: r.facts.get("python")),
        ("torch", lambda r: r.facts.get("packages", {}).get("torch")),
        ("flodl", lambda r: r.facts.get("packages", {}).get("flodl-ddp")),
    ):
        values = {r.host: split(name, get(r)) for r in live if r.checks[name][0]}
        ref = None
        if name == "flodl" and local and local.get("flodl-ddp"):
            ref, where = local["flodl-ddp"], "this machine"
        elif values:
            common = max(set(values.values()), key=list(values.values()).count)
            ref, where = common, "the other workers"
        for r in live:
            if r.host in values and ref is not None and values[r.host] != ref:
                r.checks[name] = (False, f"{get(r)} (not {ref} as on {where})")
