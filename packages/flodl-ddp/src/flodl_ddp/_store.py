"""A ``TCPStore`` server that listens on one address only: ``TCPStore(host, port,
is_master=True)`` listens on every interface, so it is handed an already bound socket
(``master_listen_fd``) to stay on loopback, or on the one interface a cluster file names.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist


def listen_store(
    addr: str, port: int = 0, *, timeout_s: float, multi_tenant: bool = False
) -> dist.TCPStore:
    """A store server bound to ``addr:port`` (port 0: a free one; read it from ``.port``);
    ``OSError`` when the address cannot be bound (not this host's, or the port in use)."""
    sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, port))
        sock.listen(1024)
        port = sock.getsockname()[1]
    except OSError:
        sock.close()
        raise
    # the store owns the listening socket from here (master_listen_fd)
    kw = dict(wait_for_workers=False, multi_tenant=multi_tenant, master_listen_fd=sock.detach())
    return dist.TCPStore(addr, port, None, True, timeout=timedelta(seconds=timeout_s), **kw)
