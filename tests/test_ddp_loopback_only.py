"""A one-machine spawned run listens on loopback only, even where the host name resolves to a
network address (cloud VMs: gloo, when no interface is named, listens on that address).

The run is started by a script in a private mount namespace whose ``/etc/hosts`` maps the host
name to one of this machine's non-loopback addresses (``unshare --mount`` and a bind mount);
while both ranks train, the script lists every TCP socket the launcher and the ranks listen on.
Needs root, ``unshare`` and a non-loopback IPv4 address; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = """\
import contextlib, json, os, socket, sys, time

import torch
from torch import nn

from flodl_ddp import DdpError, Trainer

MARKS = sys.argv[1]


def make_model():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def make_sgd(params):
    return torch.optim.SGD(params, lr=0.05)


def step(model, batch):
    import torch.distributed as dist

    mark = os.path.join(MARKS, f"rank{dist.get_rank()}")
    if not os.path.exists(mark):
        open(mark, "w").close()
    time.sleep(0.02)
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def listening(pids):
    inodes = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:
                    out.append(cols[1])
    return out


if __name__ == "__main__":
    x = torch.randn(2048, 4)
    y = x.sum(1, keepdim=True)
    handle = (
        Trainer.builder(make_model, make_sgd, step)
        .dataset((x, y))
        .batch_size(8)
        .num_epochs(20)
        .devices(["cpu", "cpu"])
        .mode("cpu-cadence")
        .run()
    )
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(MARKS, f"rank{r}")) for r in (0, 1)):
        if time.monotonic() > deadline or handle.done:
            break
        time.sleep(0.02)
    ranks = handle.all_pids()
    out = {
        "resolves_to": socket.gethostbyname(socket.gethostname()),
        "training": all(os.path.exists(os.path.join(MARKS, f"rank{r}")) for r in (0, 1)),
        "ranks": listening(ranks),
        "launcher": listening([os.getpid()]),
        "n_ranks": len(ranks),
    }
    handle.stop()
    with contextlib.suppress(DdpError):
        handle.join(timeout=30)
    print("RESULT " + json.dumps(out), flush=True)
"""


def _non_loopback_ipv4() -> str | None:
    """One of this machine's own IPv4 addresses outside 127.0.0.0/8 (``ip -4 addr``)."""
    if shutil.which("ip") is None:
        return None
    got = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=False
    )
    for line in got.stdout.splitlines():
        cols = line.split()
        if "inet" in cols:
            addr = cols[cols.index("inet") + 1].split("/")[0]
            if not addr.startswith("127."):
                return addr
    return None


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root for a private mount namespace"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare and mount (util-linux)"
    if not Path("/proc/net/tcp").exists():
        return "needs Linux /proc/net/tcp"
    probe = subprocess.run(
        ["unshare", "--mount", "true"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        return f"unshare --mount is not permitted here: {probe.stderr.strip()}"
    return None


def _hex_ip(addr: str) -> str:
    """``192.0.2.2`` as /proc/net/tcp writes it (little-endian hex)."""
    return "".join(f"{int(b):02X}" for b in reversed(addr.split(".")))


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    why = _why_not()
    addr = _non_loopback_ipv4()
    if why or addr is None:
        pytest.skip(why or "this machine has no non-loopback IPv4 address")
    root = tmp_path_factory.mktemp("loopback")
    hosts = root / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{addr} {socket.gethostname()}\n")
    script = root / "train.py"
    script.write_text(SCRIPT)
    marks = root / "marks"
    marks.mkdir()
    inner = f"mount --bind {hosts} /etc/hosts && exec {sys.executable} {script} {marks}"
    env = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"}  # nothing named
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-c", inner],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"the script failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return {"addr": addr, **json.loads(lines[-1][len("RESULT ") :])}


def test_the_host_name_resolves_elsewhere_inside(elsewhere: dict[str, Any]) -> None:
    assert elsewhere["resolves_to"] == elsewhere["addr"]
    assert elsewhere["training"] and elsewhere["n_ranks"] == 2


def test_ranks_and_store_listen_on_loopback_only(elsewhere: dict[str, Any]) -> None:
    loopback = _hex_ip("127.0.0.1")
    ranks, launcher = elsewhere["ranks"], elsewhere["launcher"]
    assert ranks, "the ranks listen on nothing: the check would see nothing"
    assert launcher, "the launcher's store is not listening: the check would see nothing"
    for local in ranks + launcher:
        assert local.split(":")[0] == loopback, (
            f"a socket listens on {local} (hex, /proc/net/tcp), not on 127.0.0.1; "
            f"the host name resolves to {elsewhere['addr']} ({_hex_ip(elsewhere['addr'])})"
        )
