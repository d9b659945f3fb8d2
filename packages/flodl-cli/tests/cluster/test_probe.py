"""``fdl probe @cluster``: each worker's facts, the cross-worker comparisons, the table."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from flodl_cli.cluster import ClusterConfig, probe_cluster

GOOD = {
    "python": "3.11.7",
    "hostname": "x",
    "packages": {"torch": "2.13.0+cpu", "flodl-core": "0.1.0", "flodl-ddp": "0.1.0"},
    "interfaces": {"lo": "127.0.0.1", "eth1": "10.0.0.2", "eth9": None},
}

# A stand-in for the worker's python: prints what FAKE_JSON says, or fails like ssh would.
FAKE = """#!/bin/sh
if [ -n "$FAKE_EXIT" ]; then echo "ssh: connect to host b port 22: No route to host" >&2; \
exit "$FAKE_EXIT"; fi
echo "FDL-PROBE $FAKE_JSON"
"""


def _cfg(tmp_path: Path, workers: list[dict[str, Any]]) -> ClusterConfig:
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    for w in workers:
        w.setdefault("python", str(fake))
    return ClusterConfig.from_dict(
        {"cluster": {"controller": {"host": "127.0.0.1"}, "transport": "local", "workers": workers}}
    )


def _facts(**change: Any) -> str:
    facts = json.loads(json.dumps(GOOD))
    for k, v in change.items():
        if k == "packages":
            facts["packages"].update(v)
            facts["packages"] = {p: q for p, q in facts["packages"].items() if q is not None}
        else:
            facts[k] = v
    return json.dumps(facts)


@pytest.mark.skipif(
    importlib.util.find_spec("flodl_ddp") is None,
    reason="a worker needs flodl-ddp: this machine is the worker here",
)
def test_this_machine_probes_green(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, [{"host": "here", "socket_ifname": "lo", "python": sys.executable}])
    report = probe_cluster(cfg)
    assert report.ok, report.table()
    row = report.hosts[0]
    assert row.checks["interface"] == (True, "lo 127.0.0.1")
    assert row.checks["torch"][1].startswith("2.")
    assert report.table().splitlines()[0].split() == [
        "host",
        "reachable",
        "python",
        "torch",
        "flodl",
        "interface",
        "data",
    ]


def test_each_failure_names_the_host_and_the_check(tmp_path: Path) -> None:
    cfg = _cfg(
        tmp_path,
        [
            {"host": "a", "socket_ifname": "eth1", "env": {"FAKE_JSON": _facts()}},
            {"host": "b", "socket_ifname": "eth1", "env": {"FAKE_EXIT": "255"}},
            {
                "host": "c",
                "socket_ifname": "eth2",
                "env": {
                    "FAKE_JSON": _facts(packages={"flodl-ddp": "0.2.0", "flodl-core": "0.2.0"})
                },
            },
            {
                "host": "d",
                "socket_ifname": "eth9",
                "env": {"FAKE_JSON": _facts(python="3.9.18", packages={"torch": None})},
            },
            {
                "host": "e",
                "socket_ifname": "eth1",
                "env": {
                    "FAKE_JSON": _facts(packages={"torch": "2.12.0+cu126", "flodl-core": "0.0.9"})
                },
            },
        ],
    )
    report = probe_cluster(cfg, local_packages={"flodl-ddp": "0.1.0"})
    assert not report.ok
    fails = {(h, c): d for h, c, d in report.failures}
    assert set(fails) == {
        ("b", "reachable"),
        ("c", "flodl"),
        ("c", "interface"),
        ("d", "python"),
        ("d", "torch"),
        ("d", "interface"),
        ("e", "torch"),
        ("e", "flodl"),
    }
    assert "exit code 255" in fails[("b", "reachable")] and "No route" in fails[("b", "reachable")]
    assert fails[("c", "flodl")] == "0.2.0 (not 0.1.0 as on this machine)"
    assert fails[("c", "interface")] == "eth2 missing (have: lo, eth1, eth9)"
    assert fails[("d", "python")] == "3.9.18 (< 3.10)"
    assert fails[("d", "torch")] == "not installed"
    assert fails[("d", "interface")] == "eth9 has no IPv4 address"
    assert fails[("e", "torch")] == "2.12.0+cu126 (not 2.13.0 as on the other workers)"
    assert fails[("e", "flodl")].startswith("mixed: flodl-core 0.0.9, flodl-ddp 0.1.0")
    assert report.hosts[0].ok and report.hosts[0].checks["flodl"] == (True, "0.1.0")
    table = report.table()
    assert "FAIL c: interface: eth2 missing (have: lo, eth1, eth9)" in table.splitlines()
    doc = json.loads(report.to_json())
    assert (
        doc["ok"] is False
        and {"host": "b", "check": "reachable"}.items() <= doc["failures"][0].items()
    )


def test_a_worker_that_does_not_answer_in_time(tmp_path: Path) -> None:
    slow = tmp_path / "slowpython"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    cfg = _cfg(tmp_path, [{"host": "z", "python": str(slow)}])
    report = probe_cluster(cfg, timeout_s=0.5)
    assert report.failures == [("z", "reachable", "no answer within 0.5 s")]
