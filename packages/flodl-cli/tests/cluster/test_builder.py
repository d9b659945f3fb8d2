"""``ClusterBuilder``: the cluster file in code, with the file's checks and messages, written
back to a file that loads equal, and taken wherever a ClusterConfig is."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import pytest

from flodl_cli.cluster import (
    ClusterBuilder,
    ClusterConfig,
    ClusterConfigError,
    SshTarget,
    plan,
    probe_cluster,
    run_cluster,
)
from flodl_cli.cluster._transport import transport_for

TUTORIAL = """\
cluster:
  controller: {host: 10.0.0.1, port: 29400, join_timeout: 60}
  env: {OMP_NUM_THREADS: 4}
  data_path: /mnt/data
  workers:
    - host: alpha
      ssh: {target: alpha.lan, user: me, port: 2222, identity_file: ~/.ssh/id, options: [A=b]}
      devices: [cuda:0, cuda:1]
      socket_ifname: eth1
      path: ~/project
      python: ~/venv/bin/python
      env: {DATA: /data}
    - {host: beta, ssh: me@beta.lan, devices: 2, socket_ifname: eth1, data_path: /data}
    - {host: gamma, devices: all, socket_ifname: eth1}
"""


def _tutorial_builder() -> ClusterBuilder:
    return (
        ClusterBuilder()
        .controller("10.0.0.1", port=29400, join_timeout=60)
        .env(OMP_NUM_THREADS=4)
        .data_path("/mnt/data")
        .worker(
            "alpha",
            ssh=SshTarget("me@alpha.lan", 2222, "~/.ssh/id", ("A=b",)),
            devices=["cuda:0", "cuda:1"],
            socket_ifname="eth1",
            path="~/project",
            python="~/venv/bin/python",
            env={"DATA": "/data"},
        )
        .worker("beta", ssh="me@beta.lan", devices=2, socket_ifname="eth1", data_path="/data")
        .worker("gamma", devices="all", socket_ifname="eth1")
    )


def _same(a: ClusterConfig, b: ClusterConfig) -> bool:
    return dataclasses.replace(a, source="") == dataclasses.replace(b, source="")


def test_builds_what_the_file_says(tmp_path: Path) -> None:
    f = tmp_path / "fdl.cluster.yml"
    f.write_text(TUTORIAL)
    built = _tutorial_builder().build()
    assert _same(built, ClusterConfig.load(f))
    assert built.source == "ClusterBuilder" and built.world_size is None
    assert built.data_path_of(built.workers[0]) == "/mnt/data"
    assert built.data_path_of(built.workers[1]) == "/data"


def test_write_then_load_is_equal(tmp_path: Path) -> None:
    out = tmp_path / "fdl.cluster.yml"
    written = _tutorial_builder().write(out)
    assert _same(written, _tutorial_builder().build())
    assert _same(ClusterConfig.load(out), written)
    assert out.read_text().startswith("# written by flodl_cli.cluster.ClusterBuilder\n")
    assert [p.name for p in tmp_path.iterdir()] == ["fdl.cluster.yml"]  # no temporary left
    again = ClusterConfig.from_dict(written.to_dict())
    assert _same(again, written)


def test_an_invalid_builder_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "fdl.cluster.yml"
    with pytest.raises(ClusterConfigError, match=r"cluster\.controller: missing"):
        ClusterBuilder().worker("a").write(out)
    assert not out.exists()


# The same mistake, as a file and as a builder: the same message after the source name.
SAME_MISTAKES: list[tuple[str, Any]] = [
    ("  workers: [{host: a, devices: [gpu0]}]\n", lambda b: b.worker("a", devices=["gpu0"])),
    (
        "  workers: [{host: a}, {host: b}]\n",
        lambda b: b.worker("a").worker("b"),
    ),
    (
        "  workers: [{host: a, socket_ifname: eth1}, {host: a, socket_ifname: eth1}]\n",
        lambda b: b.worker("a", socket_ifname="eth1").worker("a", socket_ifname="eth1"),
    ),
    ("  workers: [{host: a, netns: ns1}]\n", lambda b: b.worker("a", netns="ns1")),
    ("  workers: [{host: a, devices: 0}]\n", lambda b: b.worker("a", devices=0)),
    ("  workers: [{host: 'a b'}]\n", lambda b: b.worker("a b")),
    ("  workers: [{host: a, ssh: {port: 0}}]\n", lambda b: b.worker("a", ssh={"port": 0})),
    ("  workers: [{host: a, data_path: ''}]\n", lambda b: b.worker("a", data_path="")),
    ("  transport: rsh\n  workers: [{host: a}]\n", lambda b: b.transport("rsh").worker("a")),
    (
        "  env: {FLODL_CLUSTER_TOKEN: x}\n  workers: [{host: a}]\n",
        lambda b: b.env(FLODL_CLUSTER_TOKEN="x").worker("a"),
    ),
    ("  workers: []\n", lambda b: b),
]


@pytest.mark.parametrize(("text", "build"), SAME_MISTAKES)
def test_same_checks_and_messages_as_the_file(tmp_path: Path, text: str, build: Any) -> None:
    f = tmp_path / "f.yml"
    f.write_text("cluster:\n  controller: {host: 10.0.0.1}\n" + text)
    with pytest.raises(ClusterConfigError) as from_file:
        ClusterConfig.load(f)
    with pytest.raises(ClusterConfigError) as from_builder:
        build(ClusterBuilder().controller("10.0.0.1")).build()
    assert str(from_file.value) == f"{f}: " + str(from_builder.value).split(": ", 1)[1]
    assert str(from_builder.value).startswith("ClusterBuilder: ")


def test_taken_wherever_a_config_is(tmp_path: Path) -> None:
    fake = tmp_path / "fakepython"
    fake.write_text('#!/bin/sh\nIFS= read -r t\necho "FDL-PROBE {}"\necho "ran $*"\n')
    fake.chmod(0o755)
    b = ClusterBuilder().controller("127.0.0.1").transport("local").worker("a", python=str(fake))
    assert transport_for(b).name == "local"
    assert plan(b, ["true"], "r")[0].argv[:3] == [str(fake), "-m", "flodl_ddp._cluster_node"]
    out = io.StringIO()
    assert run_cluster(b, ["python", "t.py"], out=out, token="t" * 64) == 0
    assert "ran -m flodl_ddp._cluster_node" in out.getvalue()
    report = probe_cluster(b)
    assert report.hosts[0].checks["reachable"] == (True, "ok")
    with pytest.raises(TypeError, match="expected a ClusterConfig or a ClusterBuilder"):
        plan({"cluster": {}}, ["true"], "r")  # type: ignore[arg-type]
