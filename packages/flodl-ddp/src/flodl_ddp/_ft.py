"""Elastic runs: torchft's quorum, all-reduce and commit as the engine's strategies.

A rank of an elastic run is a torchft *replica*. Its :class:`~flodl_ddp._rank.RankEngine` is the
same as everywhere else; what differs is plugged in from here:

- :class:`TorchftQuorum` (membership): each window starts with ``manager.start_quorum()`` (a rank
  that is behind heals from a living peer there) and one small exchange that tells every member
  who the members are; the round ends with ``manager.should_commit()``;
- :class:`FtReducer` (reduction) and :class:`FtComm` (control exchanges, one rank per row of an
  all-reduced tensor) go through ``manager.allreduce``. A collective that a death cut short
  raises :class:`WindowVoid`: the engine votes no at the commit and rolls the window back.

torchft's own manager server binds every interface (``[::]``); :func:`connect` binds it to the
run's one address instead, by handing torchft a server class that overrides the bind address
(torchft has no option for it), and passes the port through torchft's own
``TORCHFT_MANAGER_PORT`` so the port is known without reading torchft's internals.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
from torch import Tensor, nn
from torch.distributed import ReduceOp

from ._comm import Comm
from ._elastic_transport import StateTransport
from ._errors import DdpError
from ._modes import Backend
from ._reduce import Segment
from ._store import listen_store


class WindowVoid(DdpError):
    """A collective of the current window failed (a peer died): the window does not count."""


class FtComm(Comm):
    """Control exchanges through torchft's fault-tolerant all-reduce: rank ``r``'s payload is
    row ``r`` of a ``(world, width)`` byte tensor (lengths first). No counters."""

    has_counters = False

    def __init__(self, manager: Any, rank: int, world_size: int) -> None:
        super().__init__(rank, world_size)
        self.manager = manager

    def _sum(self, t: Tensor) -> Tensor:
        self.manager.allreduce(t, reduce_op=ReduceOp.SUM).wait()
        if self.manager.errored() is not None:
            raise WindowVoid("a collective of this window failed (a rank died)", rank=self.rank)
        return t

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        self._next(tag)
        lengths = torch.zeros(self.world_size, dtype=torch.int64)
        lengths[self.rank] = len(payload)
        self._sum(lengths)
        width = int(lengths.max())
        if width == 0:
            return [b""] * self.world_size
        rows = torch.zeros(self.world_size, width, dtype=torch.uint8)
        if payload:
            rows[self.rank, : len(payload)] = torch.frombuffer(
                bytearray(payload), dtype=torch.uint8
            )
        self._sum(rows)
        return [bytes(rows[r, : int(lengths[r])].tolist()) for r in range(self.world_size)]

    def counter(self, key: str, add: int) -> int:
        raise DdpError("elastic runs have no shared counters (each window is planned up front)")


class FtReducer:
    """Sums the flat buffers with ``manager.allreduce`` (a rank that is not participating
    contributes zeros, torchft's rule)."""

    filled_scaled = True

    def __init__(self, manager: Any, rank: int) -> None:
        self.manager = manager
        self.rank = rank

    def target(self, k: int, out: Tensor) -> Tensor:
        return out

    def reduce(self, k: int, out: Tensor, segments: Sequence[Segment], rank: int) -> int:
        if out.numel() == 0:
            return 0
        self.manager.allreduce(out, reduce_op=ReduceOp.SUM).wait()
        if self.manager.errored() is not None:
            raise WindowVoid("the averaging all-reduce failed (a rank died)", rank=self.rank)
        return out.numel() * out.element_size()


class TorchftQuorum:
    """Membership from torchft's quorum (see the module doc)."""

    elastic = True

    def __init__(self, manager: Any, comm: FtComm) -> None:
        self.manager = manager
        self.comm = comm

    def agree(self, model: nn.Module, comm: Comm, device: torch.device, backend: Backend) -> None:
        """Nothing to do: the first quorum (``init_sync``) gives every replica the weights of
        the first one."""

    def begin(self) -> tuple[int, ...]:
        self.manager.start_quorum()
        got = self.comm.exchange_bytes("m", b"1")
        return tuple(r for r, b in enumerate(got) if b)

    def commit(self) -> bool:
        return bool(self.manager.should_commit())


def _bound_server(real: Any, host: str) -> Callable[..., Any]:
    # torchft's Manager binds its server to "[::]:port"; flodl binds it to one address.
    def make(**kw: Any) -> Any:
        port = str(kw.get("bind", ":0")).rsplit(":", 1)[-1]
        kw["bind"] = f"{host}:{port}"
        return real(**kw)

    return make


def free_port(host: str) -> int:
    """A port nothing listens on at ``host`` right now."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class FtLink:
    """A rank's torchft manager and what it needs alive: its rendezvous store, its heal
    transport; ``ports`` they bound (manager, heal, store)."""

    manager: Any
    store: Any
    transport: Any
    ports: dict[str, int]


def connect(
    rank: int,
    host: str,
    lighthouse: str,
    token: str,
    timeout_s: float,
    min_ranks: int,
    state: tuple[Callable[[], Any], Callable[[Any], None]],
) -> FtLink:
    """This rank's torchft manager (it starts heartbeating). ``state`` is
    ``(state_dict, load_state_dict)``, what a healing peer receives and how it is adopted."""
    from torchft import Manager, ProcessGroupGloo
    from torchft import manager as tm

    timeout = timedelta(seconds=timeout_s)
    tm.ManagerServer = _bound_server(tm.ManagerServer, host)
    store = listen_store(host, 0, timeout_s=timeout_s)
    transport = StateTransport(host, token, timeout)
    ports = {"manager": free_port(host), "heal": transport.port, "store": store.port}
    os.environ["TORCHFT_MANAGER_PORT"] = str(ports["manager"])
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        state_dict=state[0],
        load_state_dict=state[1],
        min_replica_size=min_ranks,
        use_async_quorum=False,
        timeout=timeout,
        quorum_timeout=timeout,
        connect_timeout=timeout,
        rank=0,
        world_size=1,
        store_addr=host,
        store_port=store.port,
        lighthouse_addr=lighthouse,
        # torchft derives a global rank from the id's trailing digits: keep them distinct
        replica_id=f"flodl_rank_{rank}",
        hostname=host,
        checkpoint_transport=transport,
        init_sync=True,
    )
    return FtLink(manager, store, transport, ports)
