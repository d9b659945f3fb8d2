"""What one rank writes down during an epoch: time by kind, batches, averaging rounds, the loss,
and the timeline spans.

The rank's engine adds to an :class:`EpochLedger` as the epoch runs; at the epoch's end the
ledger's :meth:`~EpochLedger.payload` is exchanged with the other ranks and every rank builds
the same :class:`~flodl_ddp.EpochMetrics` from all of them.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import Tensor


def peak_memory(device: torch.device) -> int:
    """The most memory tensors have held on ``device`` since the process started (bytes; 0 where
    torch keeps no count: the CPU)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return 0


def now() -> float:
    """The engine's clock (``time.perf_counter``), in seconds."""
    return time.perf_counter()


def finite(**fields: Any) -> dict[str, Any]:
    """Timeline event fields without NaN / inf (JSON cannot hold them)."""
    return {k: v for k, v in fields.items() if not isinstance(v, float) or math.isfinite(v)}


class EpochLedger:
    """One rank's running totals for the current epoch, and its timeline (if any).

    Args:
        rank: this rank.
        timeline: a :class:`~flodl_ddp.Timeline` or ``None``.
        t0: the run's start (``time.time()``), shared by every rank: timeline times count from it.
    """

    def __init__(self, rank: int, timeline: Any, t0: float) -> None:
        self.rank = rank
        self.timeline = timeline
        self.t0 = t0
        self.reset()

    def reset(self) -> None:
        """Start a new epoch."""
        self.compute = 0.0
        self.sync = 0.0
        self.idle = 0.0
        self.batches = 0
        self.syncs = 0
        self.comm_bytes = 0
        self.sync_max_ms: list[float] = []
        self.loss_total = 0.0
        self.loss_n = 0
        self._loss_sum: Tensor | None = None

    def add_loss(self, loss: Tensor) -> None:
        """Accumulate a detached scalar loss on its device (no host sync per batch)."""
        d = loss.detach().float()
        self._loss_sum = d if self._loss_sum is None else self._loss_sum + d

    def flush_loss(self, batches: int) -> None:
        """Move the device-side sum to the host (once per round: one sync instead of one per
        batch), counting ``batches`` batches."""
        if self._loss_sum is not None:
            self.loss_total += float(self._loss_sum)
            self.loss_n += batches
            self._loss_sum = None

    def payload(
        self, host: str, device: torch.device, wall_s: float, sums: dict, counts: dict
    ) -> dict:
        """This rank's numbers of the epoch, for the end-of-epoch exchange (JSON types)."""
        return {
            "host": host,
            "device": str(device),
            "peak_memory": peak_memory(device),
            "loss_sum": self.loss_total,
            "loss_n": self.loss_n,
            "batches": self.batches,
            "compute": self.compute,
            "sync": self.sync,
            "idle": self.idle,
            "comm_bytes": self.comm_bytes,
            "wall": wall_s,
            "sums": sums,
            "counts": counts,
        }

    # ---- timeline -----------------------------------------------------------------------------

    def span(self, kind: str, start: float, end: float) -> None:
        """A ``kind`` span of this rank between two :func:`now` readings."""
        if self.timeline is None or end <= start:
            return
        # perf_counter -> seconds since the run's start on the shared wall clock
        offset = time.time() - now() - self.t0
        self.timeline.span(self.rank, kind, max(0.0, start + offset), max(0.0, end + offset))

    def event(self, kind: str, **fields: Any) -> None:
        """A timeline event now (any rank; NaN / inf fields dropped)."""
        if self.timeline is not None:
            self.timeline.event(kind, time.time() - self.t0, **finite(**fields))

    def mark(self, **fields: Any) -> None:
        """Rank 0 only: an epoch boundary event, ``mark(epoch_start=3)``."""
        if self.timeline is None or self.rank != 0:
            return
        (kind, value), *rest = fields.items()
        self.timeline.event(kind, time.time() - self.t0, epoch=value, **dict(rest))
