"""What the ranks write down during an epoch: one rank's numbers since the last round and its
timeline (:class:`RankLedger`), and everyone's numbers of the epoch (:class:`EpochTally`),
identical on every rank since every rank adds every rank's numbers from each round's exchange.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import torch
from torch import Tensor

SAMPLE_EVERY_S = 0.1
"""The shortest interval between two utilization samples of a rank."""
SUMMED = ("loss_sum", "loss_n", "batches", "compute", "sync", "idle", "comm_bytes")
"""The numbers a rank hands to a round, summed per rank over the epoch."""


def peak_memory(device: torch.device) -> int:
    """The most bytes tensors have held on ``device`` so far (0 where torch keeps no count)."""
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else 0


def now() -> float:
    """The engine's clock (``time.perf_counter``), in seconds."""
    return time.perf_counter()


class RankLedger:
    """One rank's running numbers since the last round, and its timeline (``None``: none).
    ``t0``: the run's start (``time.time()``, shared by every rank): timeline times count from it.
    ``sampler``: a ``flodl_monitor.ResourceSampler`` when there is a timeline."""

    def __init__(self, rank: int, timeline: Any, t0: float, sampler: Any = None) -> None:
        self.rank, self.timeline, self.t0, self.sampler = rank, timeline, t0, sampler
        self._sampled = now()
        # the wall clock is read once: mapping each reading through a fresh time.time() let a
        # short span come out reversed when the wall clock stepped or jittered between its ends
        self._shift = time.time() - self._sampled - t0
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
        """Move the device-side sum to the host (one sync per round), counting ``batches``."""
        if self._loss is not None:
            self.numbers["loss_sum"] += float(self._loss)
            self.numbers["loss_n"] += batches
            self._loss = None

    def take(self, sums: dict[str, float], counts: dict[str, int]) -> dict[str, Any]:
        """The numbers since the last round with the recorded scalars (JSON types); start over."""
        out: dict[str, Any] = {**self.numbers, "sums": sums, "counts": counts}
        self.numbers = dict.fromkeys(SUMMED, 0.0)
        return out

    def _t(self, at: float) -> float:
        """A :func:`now` reading as seconds since the run's start on the shared wall clock
        (monotonic: the two clocks' offset is the one taken when the ledger was made)."""
        return max(0.0, at + self._shift)

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
            gpu = gpu if device.type == "cuda" else None
            self.timeline.sample(self.rank, self._t(self._sampled), cpu=cpu, gpu=gpu)

    def span(self, kind: str, start: float, end: float) -> None:
        """A ``kind`` span of this rank between two :func:`now` readings."""
        if self.timeline is not None and end > start:
            self.timeline.span(self.rank, kind, self._t(start), self._t(end))

    def event(self, kind: str, **fields: Any) -> None:
        """A timeline event now (any rank; NaN / inf fields dropped: JSON cannot hold them)."""
        if self.timeline is not None:
            ok = {k: v for k, v in fields.items() if not isinstance(v, float) or math.isfinite(v)}
            self.timeline.event(kind, self._t(now()), **ok)

    def mark(self, **fields: Any) -> None:
        """Rank 0 only: an epoch boundary event, ``mark(epoch_start=3)``."""
        if self.timeline is not None and self.rank == 0:
            (kind, value), *rest = fields.items()
            self.timeline.event(kind, self._t(now()), epoch=value, **dict(rest))


class EpochTally:
    """Every rank's numbers of the current epoch, identical on every rank: ``ranks[r]`` holds
    the summed numbers (:data:`SUMMED`), the recorded scalars' ``sums`` and ``counts``, and the
    last ``wall``, ``peak_memory``, ``host``, ``device`` rank ``r`` sent."""

    def __init__(self, world: int, hosts: list[str], devices: list[str]) -> None:
        self.hosts, self.devices, self.world = hosts, devices, world
        self.reset()

    def reset(self) -> None:
        """Start a new epoch."""
        zero = {**dict.fromkeys(SUMMED, 0.0), "wall": 0.0, "peak_memory": 0}
        self.ranks: list[dict[str, Any]] = [
            {**zero, "sums": {}, "counts": {}, "host": self.hosts[r], "device": self.devices[r]}
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
            mine.update({k: got[k] for k in ("wall", "peak_memory", "stop") if k in got})
            if got.get("eval") is not None:
                self.eval = got["eval"]

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("ranks", "syncs", "sync_ms", "eval")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ranks = [
            dict(r, sums=dict(r["sums"]), counts=dict(r["counts"])) for r in state["ranks"]
        ]
        self.syncs = int(state["syncs"])
        self.sync_ms = [float(x) for x in state["sync_ms"]]
        self.eval = state["eval"]
