"""Who trains the next window: :class:`StaticWorld` (every rank, always; a death ends the run) or
:class:`~flodl_ddp._ft.TorchftQuorum` (torchft's quorum of living ranks: a rank behind heals at
a window's start, a round a death cut short does not commit).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from ._comm import Comm
from ._modes import Backend
from ._replicas import broadcast_initial, check_replicas


class Membership(Protocol):
    """The ranks of each window. ``elastic``: whether ranks may leave and join during the run
    (windows then commit or roll back)."""

    elastic: bool

    def agree(self, model: nn.Module, comm: Comm, device: torch.device, backend: Backend) -> None:
        """Make every replica start from the same weights (a collective, before training)."""
        ...

    def begin(self) -> tuple[int, ...]:
        """The ranks taking part in the next window, in rank order."""
        ...

    def commit(self) -> bool:
        """Whether the window that just ended counts (``False``: roll it back)."""
        ...


class StaticWorld:
    """Every rank of a fixed world takes part in every window."""

    elastic = False

    def __init__(self, world: int) -> None:
        self.members = tuple(range(world))

    def agree(self, model: nn.Module, comm: Comm, device: torch.device, backend: Backend) -> None:
        """Same architecture everywhere (checked), then rank 0's initial weights everywhere."""
        if len(self.members) > 1:
            check_replicas(model, comm)
            broadcast_initial(model, device, backend)

    def begin(self) -> tuple[int, ...]:
        return self.members

    def commit(self) -> bool:
        return True
