"""Elastic runs: torchft's quorum, all-reduce and commit as the engine's strategies. A collective
a death cut short raises :class:`WindowVoid`: the rank votes no at the commit, rolls the window
back and drops its process group (a peer still in the window's collectives fails now, not at the
run's timeout, and every rank meets in the next quorum)."""

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
from ._elastic_transport import StateTransport, size_bound
from ._errors import DdpError, PeerError
from ._modes import Backend
from ._reduce import InPlace, Segment
from ._store import listen_store


class WindowVoid(DdpError):
    """A collective of the current window failed (a peer died): the window does not count."""


class Outlived(DdpError):
    """A restarted rank cannot join: nobody is left to heal from, or its heals keep failing."""


def _torchft(call: Callable[[], Any], rank: int, what: str) -> Any:
    """``call()``, with torchft's own failure (the lighthouse or a peer did not answer in time)
    as a :class:`PeerError`: a fault this rank dies of and the run survives, not a bug."""
    try:
        return call()
    except Exception as e:
        raise PeerError(f"torchft's {what} failed: {type(e).__name__}: {e}", rank=rank) from e


def _all_reduce(manager: Any, t: Tensor, rank: int, what: str) -> Tensor:
    """``t`` summed over the quorum (a rank outside it contributes zeros, torchft's rule)."""
    manager.allreduce(t, reduce_op=ReduceOp.SUM).wait()
    if manager.errored() is not None:
        raise WindowVoid(f"{what} failed (a rank died)", rank=rank)
    return t


class FtComm(Comm):
    """Control exchanges through torchft's all-reduce: rank ``r``'s payload is row ``r`` of a
    ``(world, width)`` byte tensor (lengths first). No counters."""

    has_counters = False

    def __init__(self, manager: Any, rank: int, world_size: int) -> None:
        super().__init__(rank, world_size)
        self.manager = manager

    def exchange_bytes(self, tag: str, payload: bytes) -> list[bytes]:
        self._next(tag)
        what = "a collective of this window"
        lengths = torch.zeros(self.world_size, dtype=torch.int64)
        lengths[self.rank] = len(payload)
        width = int(_all_reduce(self.manager, lengths, self.rank, what).max())
        if width == 0:
            return [b""] * self.world_size
        rows = torch.zeros(self.world_size, width, dtype=torch.uint8)
        rows[self.rank, : len(payload)] = torch.tensor(list(payload), dtype=torch.uint8)
        _all_reduce(self.manager, rows, self.rank, what)
        return [bytes(rows[r, : int(lengths[r])].tolist()) for r in range(self.world_size)]

    def counter(self, key: str, add: int) -> int:
        raise DdpError("elastic runs have no shared counters (each window is planned up front)")


class FtReducer(InPlace):
    """Sums the flat buffers with ``manager.allreduce``."""

    def __init__(self, manager: Any, rank: int) -> None:
        self.manager, self.rank = manager, rank

    def reduce(self, k: int, out: Tensor, segments: Sequence[Segment], rank: int) -> int:
        if out.numel() == 0:
            return 0
        _all_reduce(self.manager, out, self.rank, "the averaging all-reduce")
        return out.numel() * out.element_size()


class TorchftQuorum:
    """Members from torchft's quorum (an exchange after start_quorum). A ``restarted`` rank leaves
    (:class:`Outlived`) alone in its first quorum, healed from nobody, or after 3 failed heals."""

    elastic = True

    def __init__(self, manager: Any, comm: FtComm, restarted: bool = False) -> None:
        self.manager, self.comm, self.tries = manager, comm, 3 * restarted  # heal tries

    def agree(self, model: nn.Module, comm: Comm, device: torch.device, backend: Backend) -> None:
        """Nothing to do: the first quorum (``init_sync``) gives everyone the first's weights."""

    def begin(self) -> tuple[int, ...]:
        _torchft(self.manager.start_quorum, self.comm.rank, "quorum")
        if self.tries and (err := self.manager.errored()) is not None:
            self.tries -= 1
            if not self.tries:
                raise Outlived(f"its heals keep failing: {str(err).splitlines()[0]}")
        members = tuple(r for r, b in enumerate(self.comm.exchange_bytes("m", b"1")) if b)
        if self.tries and members == (self.comm.rank,) and not self.manager.current_step():
            raise Outlived("restarted after the others finished or died; nothing to heal from")
        self.tries = 0
        return members

    def commit(self) -> bool:
        if not (ok := bool(_torchft(self.manager.should_commit, self.comm.rank, "commit vote"))):
            self.manager._pg.abort()  # torchft's wrapper: aborts and drops it (closes its sockets)
        return ok


@dataclass
class FtLink:
    """A rank's torchft manager and what it needs alive: its rendezvous store, its heal
    transport; ``ports`` they bound (manager, heal, store)."""

    manager: Any
    store: Any
    transport: Any
    ports: dict[str, int]


def connect(
    rank: int, el: Any, timeout_s: float, state: tuple[Callable[[], Any], Callable[[Any], None]]
) -> FtLink:
    """This rank's torchft manager (it starts heartbeating) for the run's
    :class:`~flodl_ddp._elastic_link.ElasticLink` ``el``. ``state`` is ``(state_dict,
    load_state_dict)``: what a healing peer receives and how it is adopted."""
    from torchft import Manager, ProcessGroupGloo
    from torchft import manager as tm

    host, timeout, real = el.host, timedelta(seconds=timeout_s), tm.ManagerServer

    def bound_server(**kw: Any) -> Any:  # torchft binds "[::]:port"; flodl binds one address
        kw["bind"] = f"{host}:{str(kw.get('bind', ':0')).rsplit(':', 1)[-1]}"
        return real(**kw)

    tm.ManagerServer = bound_server
    store = listen_store(host, 0, timeout_s=timeout_s)
    # a received state may not be much larger than this rank's own: a peer cannot fill the disk
    transport = StateTransport(host, el.token, timeout, max_bytes=lambda: size_bound(state[0]()))
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))  # a free port, passed through torchft's own variable
        ports = {"manager": int(s.getsockname()[1]), "heal": transport.port, "store": store.port}
    os.environ["TORCHFT_MANAGER_PORT"] = str(ports["manager"])
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        state_dict=state[0],
        load_state_dict=state[1],
        min_replica_size=el.min_ranks,
        use_async_quorum=False,
        **dict.fromkeys(("timeout", "quorum_timeout", "connect_timeout"), timeout),
        rank=0,
        world_size=1,
        store_addr=host,
        store_port=store.port,
        lighthouse_addr=el.lighthouse,
        # torchft derives a global rank from the id's trailing digits: keep them distinct
        replica_id=f"flodl_rank_{rank}",
        hostname=host,
        checkpoint_transport=transport,
        init_sync=True,
    )
    return FtLink(manager, store, transport, ports)
