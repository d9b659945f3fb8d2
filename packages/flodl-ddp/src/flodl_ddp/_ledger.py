"""What the ranks write down during an epoch: one rank's numbers since the last round
(:class:`RankLedger`), everyone's numbers of the epoch (:class:`EpochTally`), and the timeline.

A rank adds to its :class:`RankLedger` as it trains. At each averaging round (cadence, async) or
at the epoch's end (sync) it hands its numbers (:meth:`RankLedger.take`) to the round's exchange,
and every rank adds every rank's numbers to its :class:`EpochTally`: identical on every rank,
so any of them can build the epoch's :class:`~flodl_ddp.EpochMetrics`, and an elastic run keeps
the numbers of a rank that died after its windows were committed.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import torch
from torch import Tensor

# the numbers a rank hands to a round, summed per rank over the epoch
SAMPLE_EVERY_S = 0.1
"""The shortest interval between two utilization samples of a rank."""
SUMMED = ("loss_sum", "loss_n", "batches", "compute", "sync", "idle", "comm_bytes")


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


class RankLedger:
    """One rank's running numbers since the last round, and its timeline (if any).

    Args:
        rank: this rank.
        timeline: a :class:`~flodl_ddp.Timeline` or ``None``.
        t0: the run's start (``time.time()``), shared by every rank: timeline times count from it.
    """

    def __init__(self, rank: int, timeline: Any, t0: float, sampler: Any = None) -> None:
        self.rank = rank
        self.timeline = timeline
        self.t0 = t0
        self.sampler = sampler  # a flodl_monitor.ResourceSampler when there is a timeline
        self._sampled = now()
        self.numbers: dict[str, float] = dict.fromkeys(SUMMED, 0.0)
        self._loss: Tensor | None = None

    def add(self, **amounts: float) -> None:
        """``add(compute=0.01, batches=3)``: add to this rank's numbers."""
        for k, v in amounts.items():
            self.numbers[k] += v

    def add_loss(self, loss: Tensor) -> None:
        """Accumulate a detached scalar loss on its device (no host sync per batch)."""
        d = loss.detach().float()
        self._loss = d if self._loss is None else self._loss + d

    def flush_loss(self, batches: int) -> None:
        """Move the device-side sum to the host (once per round: one sync instead of one per
        batch), counting ``batches`` batches."""
        if self._loss is not None:
            self.numbers["loss_sum"] += float(self._loss)
            self.numbers["loss_n"] += batches
            self._loss = None

    def take(self, sums: dict[str, float], counts: dict[str, int]) -> dict[str, Any]:
        """The numbers since the last round with the recorded scalars (JSON types), and start
        again."""
        out: dict[str, Any] = {**self.numbers, "sums": sums, "counts": counts}
        self.numbers = dict.fromkeys(SUMMED, 0.0)
        return out

    # ---- timeline -----------------------------------------------------------------------------

    def tick(self, device: torch.device) -> None:
        """After a batch: this process's CPU (percent of one core) and its GPU's utilization
        since the last sample into the timeline, at most every 100 ms."""
        if self.sampler is None or now() - self._sampled < SAMPLE_EVERY_S:
            return
        self._sampled = now()
        s = self.sampler.sample()
        cpu = s.proc_cpu * (os.cpu_count() or 1) if s.proc_cpu is not None else None
        gpu = next((g.util for g in s.gpus if g.dev == (device.index or 0)), None)
        if cpu is not None or gpu is not None:
            t = max(0.0, time.time() - self.t0)
            self.timeline.sample(self.rank, t, cpu=cpu, gpu=gpu if device.type == "cuda" else None)

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


class EpochTally:
    """Every rank's numbers of the current epoch, identical on every rank.

    ``ranks[r]`` holds the summed numbers (:data:`SUMMED`), the recorded scalars' ``sums`` and
    ``counts``, and the last ``wall``, ``peak_memory``, ``host``, ``device`` rank ``r`` sent.
    """

    def __init__(self, world: int, hosts: list[str], devices: list[str]) -> None:
        self.hosts = hosts
        self.devices = devices
        self.world = world
        self.reset()

    def reset(self) -> None:
        """Start a new epoch."""
        self.ranks: list[dict[str, Any]] = [
            {
                **dict.fromkeys(SUMMED, 0.0),
                "sums": {},
                "counts": {},
                "wall": 0.0,
                "peak_memory": 0,
                "host": self.hosts[r],
                "device": self.devices[r],
            }
            for r in range(self.world)
        ]
        self.syncs = 0
        self.sync_ms: list[float] = []
        self.eval: Any = None

    def add(self, parts: list[dict[str, Any] | None]) -> None:
        """One round's numbers of every rank (``None``: a rank that sent none)."""
        for mine, got in zip(self.ranks, parts, strict=True):
            if got is None:
                continue
            for k in SUMMED:
                mine[k] += got.get(k, 0.0)
            for name, v in got.get("sums", {}).items():
                mine["sums"][name] = mine["sums"].get(name, 0.0) + v
                mine["counts"][name] = mine["counts"].get(name, 0) + got["counts"][name]
            for k in ("wall", "peak_memory"):
                if k in got:
                    mine[k] = got[k]
            if got.get("eval") is not None:
                self.eval = got["eval"]

    def state_dict(self) -> dict[str, Any]:
        return {
            "ranks": self.ranks,
            "syncs": self.syncs,
            "sync_ms": self.sync_ms,
            "eval": self.eval,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ranks = [
            dict(r, sums=dict(r["sums"]), counts=dict(r["counts"])) for r in state["ranks"]
        ]
        self.syncs = int(state["syncs"])
        self.sync_ms = [float(x) for x in state["sync_ms"]]
        self.eval = state["eval"]
