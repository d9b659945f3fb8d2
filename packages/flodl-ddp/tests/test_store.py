"""The launcher's store listens on loopback only (torch's own listens on every interface)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from flodl_ddp._store import listen_store


def _listeners(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp{,6} write them) listening on ``port``."""
    out = []
    for name in ("tcp", "tcp6"):
        path = Path("/proc/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            addr, hexport = fields[1].rsplit(":", 1)
            if int(hexport, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                out.append(addr)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net")
def test_store_listens_on_loopback_only() -> None:
    store = listen_store("127.0.0.1", 0, timeout_s=10)
    store.set("k", b"v")
    assert store.get("k") == b"v"
    assert _listeners(store.port) == ["0100007F"]  # 127.0.0.1, and no [::] listener


def test_an_address_of_another_host_is_refused() -> None:
    with pytest.raises(OSError):
        listen_store("192.0.2.1", 0, timeout_s=1)  # TEST-NET-1: never an address of this host


def test_the_port_is_free_again_after_a_failed_bind() -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        with pytest.raises(OSError):
            listen_store("127.0.0.1", busy.getsockname()[1], timeout_s=1)
    finally:
        busy.close()
