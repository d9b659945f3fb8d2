"""Who trains the next window: :class:`StaticWorld` (every rank, always; a death ends the run) or
:class:`~flodl_ddp._ft.TorchftQuorum` (torchft's quorum of living ranks: a rank behind heals at
a window's start, a round a death cut short does not commit). A static world's replicas agree
before training: the same architecture on every rank (else an error that names the first
difference, not a hung collective), then rank 0's initial weights everywhere.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import torch
from torch import nn

from flodl_core import ConfigError

from ._buckets import broadcast_buckets
from ._comm import Comm
from ._modes import Backend


class Membership(Protocol):
    """The ranks of each window. ``elastic``: whether ranks may leave and join during the run
    (windows then commit or roll back)."""

    elastic: bool

    def agree(self, model: nn.Module, comm: Comm, device: torch.device, backend: Backend) -> None:
        """Make every replica start from the same weights (a collective, before training)."""

    def begin(self) -> tuple[int, ...]:
        """The ranks taking part in the next window, in rank order."""

    def commit(self) -> bool:
        """Whether the window that just ended counts (``False``: roll it back)."""


class StaticWorld:
    """Every rank of a fixed world takes part in every window."""

    elastic = False

    def __init__(self, world: int) -> None:
        self.members = tuple(range(world))

    def agree(self, model: nn.Module, comm: Comm, device: torch.device, backend: Backend) -> None:
        """Same architecture everywhere (checked), then rank 0's initial weights everywhere."""
        if len(self.members) > 1:
            check_replicas(model, comm)
            broadcast_initial(model, backend)

    def begin(self) -> tuple[int, ...]:
        return self.members

    def commit(self) -> bool:
        return True


def replica_signature(model: nn.Module) -> list[list[Any]]:
    """``[kind, name, shape, dtype]`` of every parameter, then every buffer."""
    items = [("param", model.named_parameters()), ("buffer", model.named_buffers())]
    return [
        [kind, name, list(t.shape), str(t.dtype).removeprefix("torch.")]
        for kind, named in items
        for name, t in named
    ]


def check_replicas(model: nn.Module, comm: Comm) -> None:
    """Raise :class:`ConfigError` on every rank when the replicas differ between ranks."""
    mine = json.dumps(replica_signature(model)).encode()
    sigs = [json.loads(b) for b in comm.exchange_bytes("sig", mine)]
    ref = sigs[0]
    for r, sig in enumerate(sigs[1:], start=1):
        if sig == ref:
            continue
        n0, nr = (sum(e[0] == "param" for e in x) for x in (ref, sig))
        detail = f"rank 0 has {n0} parameters, rank {r} has {nr}"
        if diff := next(((a, b) for a, b in zip(ref, sig, strict=False) if a != b), None):
            a, b = (" ".join(map(str, e)) for e in diff)
            detail += f"; first difference: rank 0 {a} vs rank {r} {b}"
        raise ConfigError(
            f"model replicas differ between ranks ({detail}); model_factory must build the same "
            "architecture on every rank"
        )


@torch.no_grad()
def broadcast_initial(model: nn.Module, backend: Backend) -> None:
    """Rank 0's initial parameters and buffers everywhere. The cpu backend goes through CPU
    copies, so ranks on different device kinds can pair up."""
    tensors = [p.data for p in model.parameters()] + list(model.buffers())
    copies = [t.to("cpu") for t in tensors] if backend is Backend.CPU else tensors
    if tensors:
        broadcast_buckets(copies)
    for t, c in zip(tensors, copies, strict=True):
        if c is not t:
            t.copy_(c)
