"""Two "machines" on one: network namespaces joined by a veth pair, one rank each.

``fdl @cluster``'s launcher (flodl-cli) starts flodl-ddp's node agents through the local
transport inside ``ip netns exec``; the ranks find each other over the veth link only (gloo
bound to it through ``GLOO_SOCKET_IFNAME``), prove the run token, and train. Then the link goes
down mid-run: both sides fail with a clean error, the launcher returns non-zero, and nothing is
left behind.
Needs root and ``ip netns``; skipped otherwise.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flodl_cli.cluster import ClusterConfig, run_cluster

pytestmark = pytest.mark.multiprocess
SCRIPT = Path(__file__).with_name("cluster_train_script.py")
ADDR = ("10.77.0.1", "10.77.0.2")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs the ip command (iproute2)"
    if _ip("netns", "list", check=False).returncode != 0:
        return "ip netns is not available here"
    return None


@pytest.fixture
def two_hosts() -> Iterator[dict[str, str]]:
    why = _why_not()
    if why:
        pytest.skip(why)
    tag = f"fdl{os.getpid() % 10_000_000}"
    names = {"ns_a": f"{tag}a", "ns_b": f"{tag}b", "if_a": f"{tag}va", "if_b": f"{tag}vb"}
    try:
        _ip("netns", "add", names["ns_a"])
        _ip("netns", "add", names["ns_b"])
        _ip("link", "add", names["if_a"], "type", "veth", "peer", "name", names["if_b"])
        for side, addr in zip("ab", ADDR, strict=True):
            ns, dev = names[f"ns_{side}"], names[f"if_{side}"]
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
    except subprocess.CalledProcessError as e:
        _teardown(names)
        pytest.skip(f"cannot build the namespaces here: {e.stderr.strip()}")
    try:
        yield names
    finally:
        _teardown(names)


def _pids(ns: str) -> list[int]:
    done = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _teardown(names: dict[str, str]) -> None:
    for ns in (names["ns_a"], names["ns_b"]):
        for pid in _pids(ns):  # only processes this test started live in its namespaces
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        _ip("netns", "del", ns, check=False)
    _ip("link", "del", names["if_a"], check=False)  # gone with its namespace; just in case


class Watch(io.TextIOBase):
    """The launcher's output: collects lines, and calls ``trigger`` once both hosts printed
    ``after`` epochs."""

    def __init__(self, after: int, trigger: Any) -> None:
        self.lines: list[str] = []
        self.after = after
        self.trigger = trigger
        self.fired_at: float | None = None

    def write(self, s: str) -> int:
        self.lines += s.splitlines()
        epochs = [
            len([x for x in self.lines if x.startswith(f"{h} ") and " | epoch " in x]) for h in "ab"
        ]
        if self.fired_at is None and min(epochs) >= self.after:
            self.fired_at = time.monotonic()
            self.trigger()
        return len(s)

    def losses(self, host: str) -> list[float]:
        out = []
        for x in self.lines:
            m = re.match(rf"^{host}\s+\| epoch (\d+) loss ([0-9.]+)$", x)
            if m:
                out.append(float(m.group(2)))
        return out


def _ps(pids: list[int]) -> str:
    rows = []
    for pid in pids:
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            rows.append(f"{pid}: {cmd}")
    return "\n".join(rows)


def _listeners(ns: str) -> list[str]:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, "ss", "-Hltn"], capture_output=True, text=True, timeout=10
    )
    return [line.split()[3] for line in done.stdout.splitlines() if line.strip()]


def test_two_namespaces_train_then_a_dropped_link_fails_cleanly(two_hosts: dict[str, str]) -> None:
    n = two_hosts
    cfg = ClusterConfig.from_dict(
        {
            "cluster": {
                "controller": {"host": ADDR[0], "port": 29400, "join_timeout": 60},
                "transport": "local",
                "env": {"EPOCHS": 400, "STEP_SLEEP": 0.005, "TMO": 4, "OMP_NUM_THREADS": 1},
                "workers": [
                    {
                        "host": side,
                        "netns": n[f"ns_{side}"],
                        "socket_ifname": n[f"if_{side}"],
                        "python": sys.executable,
                        "path": str(SCRIPT.parent),
                    }
                    for side in "ab"
                ],
            }
        },
        source="test",
    )
    seen: dict[str, Any] = {}

    def drop_link() -> None:
        seen["listeners"] = _listeners(n["ns_a"]) if shutil.which("ss") else None
        _ip("-n", n["ns_a"], "link", "set", n["if_a"], "down")

    out = Watch(after=4, trigger=drop_link)
    result: dict[str, Any] = {}

    def launch() -> None:
        result["code"] = run_cluster(cfg, ["python", SCRIPT.name], out=out)

    t0 = time.monotonic()
    thread = threading.Thread(target=launch, daemon=True)
    thread.start()
    thread.join(90)  # hard limit: a hang fails the test; the fixture kills what is left
    assert not thread.is_alive(), "the launcher hung after the link went down:\n" + "\n".join(
        out.lines[-30:]
    )
    text = "\n".join(out.lines)
    # Trained across the link: the loss went down, and both hosts report the same averaged run.
    la, lb = out.losses("a"), out.losses("b")
    assert len(la) >= 4 and len(lb) >= 4, text[-3000:]
    assert la[3] < 0.5 * la[0], la
    assert la[:4] == lb[:4]
    assert "a   | token length 64" in out.lines and "b   | token length 64" in out.lines
    # The rendezvous store, which the ranks use too, listens on the cluster address only: one
    # listener in the first namespace besides gloo's, none on 0.0.0.0 or [::].
    if seen.get("listeners") is not None:
        assert seen["listeners"], "nothing was listening in the first namespace"
        assert all(a.startswith(f"{ADDR[0]}:") for a in seen["listeners"]), seen["listeners"]
    # Then the link dropped: a clean failure, in bounded time, with a non-zero exit code.
    assert out.fired_at is not None
    assert result["code"] != 0
    assert time.monotonic() - out.fired_at < 45
    # flodl's own error (DdpError, or PeerError: a rank failed because its peer stopped
    # answering, naming that rank), not a crash inside torch
    assert "failed with exit code" in text, text[-3000:]
    assert "DdpError" in text or "PeerError" in text, text[-3000:]
    assert "done" not in [x.split("| ", 1)[-1] for x in out.lines]
    left = _pids(n["ns_a"]) + _pids(n["ns_b"])
    assert left == [], _ps(left) + "\n" + text[-4000:]  # nothing left behind
    assert time.monotonic() - t0 < 90
