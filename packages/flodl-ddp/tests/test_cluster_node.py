"""The node agent's pieces: interface lookup, stores bound to one address, argument split."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flodl_core import ConfigError
from flodl_ddp import _cluster_node as node


def _listeners(port: int) -> list[str]:
    """The local addresses listening on TCP ``port`` (from /proc/net/tcp and tcp6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, p = local.split(":")
            if state == "0A" and int(p, 16) == port:  # 0A: LISTEN
                out.append(addr)
    return out


def test_interface_address() -> None:
    assert node.interface_address("lo") == "127.0.0.1"
    with pytest.raises(ConfigError, match=r"socket_ifname 'nope0' does not exist on this machine"):
        node.interface_address("nope0", "socket_ifname")


def test_a_missing_socket_ifname_ends_the_agent_with_one_line() -> None:
    argv = ["--name=a", "--ifname=nope0", "--rdzv-endpoint=127.0.0.1:1", "--", "true"]
    with subprocess.Popen(
        [sys.executable, "-m", "flodl_ddp._cluster_node", *argv],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as p:
        assert p.stdin is not None and p.stderr is not None
        try:  # stdin stays open (a closed one stops the agent): only the error may end it
            p.stdin.write("token\n")
            p.stdin.flush()
            p.wait(timeout=60)
            err = p.stderr.read()
        finally:
            p.kill()
    assert p.returncode == 1, err
    assert err.strip().startswith("fdl cluster: socket_ifname 'nope0' does not exist on this")


def test_bound_store_listens_on_one_address_only() -> None:
    store = node.bound_store("127.0.0.1", 0, 10.0)
    store.set("k", b"v")
    assert _listeners(store.port) == ["0100007F"]  # 127.0.0.1 alone, no 0.0.0.0, no [::]
    with pytest.raises(SystemExit, match=r"cannot listen on 192\.0\.2\.1:.*first worker"):
        node.bound_store("192.0.2.1", 0, 1.0)  # TEST-NET-1: an address this machine lacks


def test_torchruns_static_store_shares_the_bound_one() -> None:
    """Node 0's torchrun opens its static-rendezvous store on the controller's port; the agent's
    store, bound to one address, is the server it gets (multi_tenant): still one listener."""
    from torch.distributed.elastic.rendezvous.static_tcp_rendezvous import StaticTCPRendezvous

    store = node.bound_store("127.0.0.1", 0, 10.0)
    rdzv = StaticTCPRendezvous("127.0.0.1", store.port, 0, 1, "run", 10)
    info = rdzv.next_rendezvous()
    info.store.set("k", b"v")
    assert store.get("run/k") == b"v"  # the same server (static prefixes the run id)
    assert _listeners(store.port) == ["0100007F"]
    assert info.bootstrap_store_info.master_port == store.port  # the ranks' store, too


def test_no_torch_internals_are_patched() -> None:
    source = Path(node.__file__).read_text()
    assert "_create_tcp_store_server" not in source
    assert "DynamicRendezvousHandler" not in source


def test_torchrun_extra_and_path() -> None:
    assert node.torchrun_extra(45.5, "10.0.0.2") == [
        "--rdzv-conf=timeout=46",
        "--no-python",
        "--local-addr=10.0.0.2",
    ]
    assert node.torchrun_extra(300, None) == ["--rdzv-conf=timeout=300", "--no-python"]
    assert node.path_with_bin("/usr/bin:/v/bin:/bin", "/v/bin/python") == "/v/bin:/usr/bin:/bin"
    assert node.path_with_bin(None, "/v/bin/python") == "/v/bin"


def test_parse_splits_agent_torchrun_and_command() -> None:
    opts, torchrun, command = node.parse(
        [
            "--name=a",
            "--ifname=eth1",
            "--host-rendezvous",
            "--nnodes=2",
            "--rdzv-endpoint=10.0.0.1:29400",
            "--",
            "python",
            "train.py",
            "--name=x",
        ]
    )
    assert (opts.name, opts.ifname, opts.host_rendezvous) == ("a", "eth1", True)
    assert torchrun == ["--nnodes=2", "--rdzv-endpoint=10.0.0.1:29400"]
    assert command == ["python", "train.py", "--name=x"]
    assert node._split_endpoint("[::1]:5") == ("::1", 5)
    with pytest.raises(SystemExit, match="COMMAND"):
        node.parse(["--name=a"])
