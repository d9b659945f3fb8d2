"""``fdl.cluster.yml`` validation: a full file, the defaults, and one wrong value per key."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from flodl_cli.cluster import ClusterConfig, ClusterConfigError, SshTarget, find_cluster_file

FULL = """\
cluster:
  controller: {host: 10.0.0.1, port: 29400, join_timeout: 60}
  env: {OMP_NUM_THREADS: 2}
  workers:
    - host: alpha
      ssh: {target: alpha.lan, user: me, port: 2222, identity_file: ~/.ssh/id_ed25519,
            options: [StrictHostKeyChecking=yes]}
      devices: [cuda:0, cuda:1]
      socket_ifname: eth1
      path: ~/project
      python: /opt/venv/bin/python
      env: {DATA: /data, SEED: 3}
    - host: beta
      ssh: me@beta.lan
      devices: 2
      socket_ifname: enp5s0
"""


def _base() -> dict[str, Any]:
    return {
        "cluster": {
            "controller": {"host": "10.0.0.1"},
            "workers": [
                {"host": "a", "socket_ifname": "eth1"},
                {"host": "b", "socket_ifname": "eth1"},
            ],
        }
    }


def test_full_file_loads(tmp_path: Path) -> None:
    f = tmp_path / "fdl.cluster.yml"
    f.write_text(FULL)
    cfg = ClusterConfig.load(f)
    assert cfg.controller.endpoint == "10.0.0.1:29400"
    assert cfg.controller.join_timeout == 60.0
    assert cfg.transport == "ssh"
    assert cfg.env == {"OMP_NUM_THREADS": "2"}
    a, b = cfg.workers
    assert a.ssh == SshTarget(
        "me@alpha.lan", 2222, "~/.ssh/id_ed25519", ("StrictHostKeyChecking=yes",)
    )
    assert a.devices == ("cuda:0", "cuda:1") and a.nproc == "2" and a.cuda_visible == "0,1"
    assert a.env == {"DATA": "/data", "SEED": "3"} and a.path == "~/project"
    assert b.ssh == SshTarget("me@beta.lan") and b.devices == ("cpu", "cpu")
    assert b.cuda_visible is None and b.python == "python3"
    assert cfg.world_size == 4 and cfg.source == str(f)
    assert find_cluster_file(tmp_path) == f
    (tmp_path / "sub").mkdir()
    assert find_cluster_file(tmp_path / "sub") == f


def test_defaults() -> None:
    cfg = ClusterConfig.from_dict(
        {"cluster": {"controller": {"host": "node0"}, "workers": [{"host": "node0"}]}}
    )
    assert cfg.controller.port == 1337 and cfg.controller.join_timeout == 300.0
    w = cfg.workers[0]
    assert (w.ssh, w.devices, w.socket_ifname, w.python, w.env) == (
        None,
        ("cpu",),
        None,
        "python3",
        {},
    )
    assert (
        ClusterConfig.from_dict(
            {
                "cluster": {
                    "controller": {"host": "::1"},
                    "workers": [{"host": "x", "devices": "all"}],
                }
            }
        ).controller.endpoint
        == "[::1]:1337"
    )


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return out


_DELETE = object()

# (path to change, new value, words the error must contain): one wrong input per key.
WRONG = [
    ("cluster", _DELETE, ["top-level 'cluster:'"]),
    ("extra", 1, ["extra: unknown top-level key"]),
    ("cluster.hosts", [], ["cluster.hosts", "old cluster key", "cluster.workers"]),
    (
        "cluster.bogus",
        1,
        ["cluster.bogus: unknown key", "controller, transport, env, data_path, workers"],
    ),
    ("cluster.controller", _DELETE, ["cluster.controller: missing"]),
    ("cluster.controller", "10.0.0.1", ["cluster.controller: expected a mapping"]),
    ("cluster.controller.host", _DELETE, ["cluster.controller.host: missing"]),
    ("cluster.controller.host", "0.0.0.0", ["cluster.controller.host", "not a listen-everywhere"]),
    ("cluster.controller.host", 5, ["cluster.controller.host: expected an address"]),
    ("cluster.controller.port", 0, ["cluster.controller.port", "integer from 1 to 65535", "0"]),
    ("cluster.controller.port", "80", ["cluster.controller.port", "'80'"]),
    ("cluster.controller.join_timeout", -1, ["cluster.controller.join_timeout", "positive"]),
    ("cluster.controller.master_port", 1, ["master_port", "cluster.controller.port"]),
    ("cluster.transport", "rsh", ["cluster.transport", "one of ssh, local", "'rsh'"]),
    ("cluster.env", ["A=1"], ["cluster.env", "mapping of variable names"]),
    ("cluster.env", {"1X": "a"}, ["cluster.env.1X", "variable name"]),
    ("cluster.env", {"A": [1]}, ["cluster.env.A", "a string or a number"]),
    ("cluster.env", {"FLODL_CLUSTER_TOKEN": "x"}, ["cluster.env.FLODL_CLUSTER_TOKEN", "never"]),
    ("cluster.workers", [], ["cluster.workers", "non-empty list"]),
    ("cluster.workers.0", "a", ["cluster.workers[0]: expected a mapping"]),
    ("cluster.workers.0.host", _DELETE, ["cluster.workers[0].host: missing"]),
    ("cluster.workers.0.host", "a b", ["cluster.workers[0].host", "letters, digits"]),
    ("cluster.workers.1.host", "a", ["cluster.workers[1].host", "used twice"]),
    ("cluster.workers.0.color", "red", ["cluster.workers[0].color: unknown key", "socket_ifname"]),
    ("cluster.workers.0.ssh", 7, ["cluster.workers[0].ssh: expected a mapping"]),
    ("cluster.workers.0.ssh", {"host": "x"}, ["cluster.workers[0].ssh.host: unknown key"]),
    ("cluster.workers.0.ssh", {"port": 0}, ["cluster.workers[0].ssh.port", "1 to 65535"]),
    ("cluster.workers.0.ssh", {"user": "me", "target": "u@a"}, ["ssh.user", "already names"]),
    ("cluster.workers.0.ssh", {"options": ["Batch"]}, ["ssh.options", "KEY=VALUE"]),
    ("cluster.workers.0.ssh", {"identity_file": ""}, ["ssh.identity_file", "private key"]),
    ("cluster.workers.0.devices", ["gpu0"], ["cluster.workers[0].devices[0]", "'cpu' or 'cuda:N'"]),
    ("cluster.workers.0.devices", ["cpu", "cuda:0"], ["devices", "of one kind"]),
    ("cluster.workers.0.devices", ["cuda:1", "cuda:1"], ["devices", "each GPU once"]),
    ("cluster.workers.0.devices", 0, ["devices", "positive number of CPU ranks"]),
    ("cluster.workers.0.devices", [], ["devices", "a list like [cpu]"]),
    ("cluster.workers.0.local_devices", [], ["local_devices", "old cluster key", "devices"]),
    ("cluster.workers.0.socket_ifname", _DELETE, ["workers[0].socket_ifname: missing", "eth1"]),
    ("cluster.workers.0.socket_ifname", "a/b", ["socket_ifname", "interface name"]),
    ("cluster.workers.0.path", "", ["cluster.workers[0].path", "a directory"]),
    ("cluster.workers.0.python", None, ["cluster.workers[0].python", "Python command"]),
    ("cluster.workers.0.env", "A=1", ["cluster.workers[0].env", "mapping"]),
    ("cluster.workers.0.netns", "ns1", ["cluster.workers[0].netns", "transport: local"]),
    ("cluster.data_path", 5, ["cluster.data_path", "shared data"]),
    ("cluster.workers.0.data_path", " ", ["cluster.workers[0].data_path", "shared data"]),
]


@pytest.mark.parametrize(
    ("path", "value", "words"), WRONG, ids=[w[0] + str(i) for i, w in enumerate(WRONG)]
)
def test_one_wrong_value_per_key(path: str, value: Any, words: list[str]) -> None:
    doc = _set(_base(), path, value)
    with pytest.raises(ClusterConfigError) as info:
        ClusterConfig.from_dict(doc, source="fdl.cluster.yml")
    text = str(info.value)
    assert text.startswith("fdl.cluster.yml: ")
    for w in words:
        assert w in text, (w, text)


def test_netns_needs_a_valid_name_with_local_transport() -> None:
    doc = _set(_base(), "cluster.transport", "local")
    ok = ClusterConfig.from_dict(_set(doc, "cluster.workers.0.netns", "ns-1"))
    assert ok.workers[0].netns == "ns-1"
    with pytest.raises(
        ClusterConfigError, match=r"workers\[0\]\.netns: expected a network namespace"
    ):
        ClusterConfig.from_dict(_set(doc, "cluster.workers.0.netns", "a b"))


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError, match="cannot read cluster file"):
        ClusterConfig.load(tmp_path / "missing.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("cluster: [unclosed\n")
    with pytest.raises(ClusterConfigError, match=r"bad\.yml:2: not valid YAML"):
        ClusterConfig.load(bad)


def test_single_worker_needs_no_interface() -> None:
    cfg = ClusterConfig.from_dict(
        {"cluster": {"controller": {"host": "127.0.0.1"}, "workers": [{"host": "solo"}]}}
    )
    assert cfg.workers[0].socket_ifname is None
    assert cfg.worker("solo").host == "solo"
    with pytest.raises(ClusterConfigError, match="no worker named 'nope'"):
        cfg.worker("nope")
