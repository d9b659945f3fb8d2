"""``fdl @cluster``'s launcher: the argv each worker gets, output prefixing, exit codes, stopping.

The fan-out tests run "workers" through the local transport with a fake ``python`` (a shell
script) in place of the node agent, so they test the launcher alone, in milliseconds.
"""

from __future__ import annotations

import io
import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from flodl_cli.cluster import ClusterConfig, LocalTransport, SshTransport, plan, run_cluster
from flodl_cli.cluster import _launch as launch
from flodl_cli.cluster._transport import remote_line

TOKEN = "t" * 64


def _cfg(**worker_extra: Any) -> ClusterConfig:
    a = {"host": "alpha", "socket_ifname": "eth1", "devices": ["cuda:0", "cuda:2"], **worker_extra}
    return ClusterConfig.from_dict(
        {
            "cluster": {
                "controller": {"host": "10.0.0.1", "port": 29400, "join_timeout": 45},
                "env": {"OMP_NUM_THREADS": 1, "SHARED": "c"},
                "workers": [
                    a,
                    {
                        "host": "beta",
                        "socket_ifname": "enp5s0",
                        "devices": 3,
                        "env": {"SHARED": "w"},
                    },
                    {"host": "gamma", "socket_ifname": "eth0", "devices": "all"},
                ],
            }
        }
    )


# ---- argv construction ---------------------------------------------------------------------------


def test_plan_gives_each_worker_its_torchrun_options_and_env() -> None:
    a, b, c = plan(_cfg(), ["python", "train.py", "--lr", "0.1"], "fdl-run1")
    assert a.argv == [
        "python3",
        "-m",
        "flodl_ddp._cluster_node",
        "--name=alpha",
        "--join-timeout=45",
        "--ifname=eth1",
        "--host-rendezvous",  # the first worker hosts the rendezvous
        "--nnodes=3",
        "--node-rank=0",  # static rendezvous: node ranks follow the file's order
        "--nproc-per-node=2",
        "--rdzv-backend=static",
        "--rdzv-endpoint=10.0.0.1:29400",
        "--rdzv-id=fdl-run1",
        "--max-restarts=0",
        "--",
        "python",
        "train.py",
        "--lr",
        "0.1",
    ]
    assert "--host-rendezvous" not in b.argv and "--host-rendezvous" not in c.argv
    assert "--nproc-per-node=3" in b.argv and "--nproc-per-node=gpu" in c.argv
    assert "--node-rank=1" in b.argv and "--node-rank=2" in c.argv
    assert [n.node_rank for n in (a, b, c)] == [0, 1, 2]
    assert a.env["GLOO_SOCKET_IFNAME"] == "eth1" and a.env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert a.env["CUDA_VISIBLE_DEVICES"] == "0,2" and "CUDA_VISIBLE_DEVICES" not in b.env
    assert b.env["GLOO_SOCKET_IFNAME"] == "enp5s0"
    assert a.env["SHARED"] == "c" and b.env["SHARED"] == "w"  # the worker's env wins
    assert a.env["OMP_NUM_THREADS"] == "1" and a.env["PYTHONUNBUFFERED"] == "1"
    for n in (a, b, c):
        assert "FLODL_CLUSTER_TOKEN" not in n.env  # the token never travels in env or argv
    with pytest.raises(ValueError, match="command is empty"):
        plan(_cfg(), [], "x")


def test_worker_env_can_override_the_interface_variables() -> None:
    cfg = _cfg(env={"GLOO_SOCKET_IFNAME": "bond0"})
    assert plan(cfg, ["true"], "r")[0].env["GLOO_SOCKET_IFNAME"] == "bond0"


def test_ssh_argv() -> None:
    cfg = ClusterConfig.from_dict(
        {
            "cluster": {
                "controller": {"host": "10.0.0.1"},
                "workers": [
                    {
                        "host": "alpha",
                        "socket_ifname": "eth1",
                        "ssh": {
                            "target": "alpha.lan",
                            "user": "me",
                            "port": 2222,
                            "identity_file": "/keys/id",
                            "options": ["StrictHostKeyChecking=yes"],
                        },
                        "path": "/srv/my project",
                    },
                    {"host": "beta", "socket_ifname": "eth1", "path": "~/proj"},
                ],
            }
        }
    )
    t = SshTransport()
    argv = t.argv(cfg.workers[0], ["python3", "-m", "x", "--", "python", "a b.py"], {"A": "1 2"})
    assert argv[:8] == [
        "ssh",
        "-T",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "ServerAliveInterval=15",
    ]
    assert argv[8:16] == [
        "-p",
        "2222",
        "-i",
        "/keys/id",
        "-o",
        "StrictHostKeyChecking=yes",
        "--",
        "me@alpha.lan",
    ]
    assert len(argv) == 17
    line = argv[16]
    assert line == "cd '/srv/my project' && exec env 'A=1 2' python3 -m x -- python 'a b.py'"
    # The remote shell splits it back into exactly the words we meant.
    assert shlex.split(line.split(" && ", 1)[1]) == [
        "exec",
        "env",
        "A=1 2",
        "python3",
        "-m",
        "x",
        "--",
        "python",
        "a b.py",
    ]
    beta = t.argv(cfg.workers[1], ["true"], {})
    assert beta[-2:] == ["beta", "cd ~/proj && exec true"]  # no ssh: the name is the target
    assert remote_line(cfg.workers[1], ["true"], {}) == "cd ~/proj && exec true"
    spawn = t.spawn(cfg.workers[1], ["true"], {"K": "v"})
    assert spawn.env is None and spawn.cwd is None  # ssh runs with our env; K goes in the line


def test_local_transport_and_netns_prefix(tmp_path: Path) -> None:
    cfg = ClusterConfig.from_dict(
        {
            "cluster": {
                "controller": {"host": "127.0.0.1"},
                "transport": "local",
                "workers": [
                    {"host": "a", "socket_ifname": "lo", "netns": "ns-a", "path": str(tmp_path)},
                    {"host": "b", "socket_ifname": "lo"},
                ],
            }
        }
    )
    t = LocalTransport()
    s = t.spawn(cfg.workers[0], ["python3", "x.py"], {"K": "v"})
    assert s.argv == ["ip", "netns", "exec", "ns-a", "python3", "x.py"]
    assert s.cwd == str(tmp_path) and s.env is not None and s.env["K"] == "v"
    assert s.env["PATH"] == os.environ["PATH"]
    assert t.spawn(cfg.workers[1], ["x"], {}).argv == ["x"]


# ---- fan-out, prefixes, exit codes ---------------------------------------------------------------

FAKE_PYTHON = r"""#!/bin/sh
# Stands in for "python -m flodl_ddp._cluster_node": first stdin line = the run token.
IFS= read -r token
echo "token length ${#token}"
case "$*" in *"$token"*) echo "TOKEN IN ARGV";; esac
echo "host $FAKE_NAME nproc $(echo "$*" | tr ' ' '\n' | grep nproc)"
case "$FAKE_MODE" in
  ok) echo "line two"; exit 0 ;;
  fail) sleep "${FAKE_DELAY:-0.3}"; echo "failing now" >&2; exit "$FAKE_CODE" ;;
  wait) while IFS= read -r _; do :; done; echo "stdin closed, leaving"; exit 0 ;;
  stubborn) trap '' TERM; echo "ignoring"; while :; do sleep 0.1; done ;;
esac
"""


def _fake_cluster(tmp_path: Path, modes: dict[str, dict[str, str]]) -> ClusterConfig:
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    workers = [
        {
            "host": name,
            "socket_ifname": "lo",
            "python": str(fake),
            "env": {"FAKE_NAME": name, **env},
        }
        for name, env in modes.items()
    ]
    return ClusterConfig.from_dict(
        {"cluster": {"controller": {"host": "127.0.0.1"}, "transport": "local", "workers": workers}}
    )


def _lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_output_is_prefixed_and_success_is_zero(tmp_path: Path) -> None:
    cfg = _fake_cluster(tmp_path, {"a": {"FAKE_MODE": "ok"}, "bbbb": {"FAKE_MODE": "ok"}})
    out = io.StringIO()
    assert run_cluster(cfg, ["python", "t.py"], out=out, token=TOKEN) == 0
    lines = _lines(out)
    assert "a    | token length 64" in lines and "bbbb | token length 64" in lines
    assert "a    | line two" in lines and "bbbb | line two" in lines
    assert "a    | host a nproc --nproc-per-node=1" in lines
    assert not any("TOKEN IN ARGV" in x or TOKEN in x for x in lines)
    assert all(x.startswith(("a    | ", "bbbb | ")) for x in lines)


def test_generated_token_is_fresh_per_run(tmp_path: Path) -> None:
    cfg = _fake_cluster(tmp_path, {"a": {"FAKE_MODE": "ok"}})
    out = io.StringIO()
    assert run_cluster(cfg, ["x"], out=out) == 0
    assert "a   | token length 64" in _lines(out)


def test_first_failure_code_wins_and_stops_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "STOP_GRACE_S", 1.0)  # c ignores its stdin: SIGTERM after 1 s
    cfg = _fake_cluster(
        tmp_path,
        {
            "a": {"FAKE_MODE": "wait"},
            "b": {"FAKE_MODE": "fail", "FAKE_CODE": "7", "FAKE_DELAY": "0.3"},
            "c": {"FAKE_MODE": "fail", "FAKE_CODE": "9", "FAKE_DELAY": "5"},
        },
    )
    out = io.StringIO()
    t = time.monotonic()
    code = run_cluster(cfg, ["python", "t.py"], out=out, token=TOKEN)
    assert code == 7
    assert time.monotonic() - t < 4.5  # c (5 s) was stopped, not waited for
    lines = _lines(out)
    assert "b   | failing now" in lines  # stderr is fanned in too
    assert "fdl | b failed with exit code 7: stopping the other workers" in lines
    assert "a   | stdin closed, leaving" in lines  # a stopped cleanly when its stdin closed
    assert not any("c   | failing now" in x for x in lines)


def test_a_worker_that_ignores_stop_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launch, "STOP_GRACE_S", 0.3)
    monkeypatch.setattr(launch, "KILL_GRACE_S", 0.3)
    cfg = _fake_cluster(
        tmp_path,
        {"a": {"FAKE_MODE": "stubborn"}, "b": {"FAKE_MODE": "fail", "FAKE_CODE": "4"}},
    )
    spawned: list[Any] = []
    real = launch._Node.__init__

    def keep(self: Any, *args: Any) -> None:
        real(self, *args)
        spawned.append(self.proc)

    monkeypatch.setattr(launch._Node, "__init__", keep)
    t = time.monotonic()
    assert run_cluster(cfg, ["x"], out=io.StringIO(), token=TOKEN) == 4
    assert time.monotonic() - t < 5
    assert all(p.poll() is not None for p in spawned)
    assert spawned[0].returncode == -9  # SIGTERM was ignored: SIGKILL


def test_a_missing_program_fails_cleanly(tmp_path: Path) -> None:
    cfg = _fake_cluster(tmp_path, {"a": {"FAKE_MODE": "ok"}})
    broken = ClusterConfig.from_dict(
        {
            "cluster": {
                "controller": {"host": "127.0.0.1"},
                "transport": "local",
                "workers": [{"host": "a", "python": str(tmp_path / "nope")}],
            }
        }
    )
    assert cfg.workers[0].python != broken.workers[0].python
    with pytest.raises(FileNotFoundError):
        run_cluster(broken, ["x"], out=io.StringIO(), token=TOKEN)
