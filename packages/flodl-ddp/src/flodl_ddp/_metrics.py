"""What a run reports per epoch: :class:`EpochMetrics`, :func:`record_scalar`, monitor wiring.

Every rank builds the same :class:`EpochMetrics` from the epoch sums all ranks exchanged
(:mod:`flodl_ddp._ledger`); the launching process receives one copy.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flodl_core import ConfigError

from ._ledger import EpochTally

_local = threading.local()


def record_scalar(name: str, value: float) -> None:
    """Record a named number inside ``train_step``; each epoch's mean over every call on every
    rank lands in :attr:`EpochMetrics.scalars` (``record_scalar("acc", 0.93)``). Outside a
    distributed run it does nothing, so a ``train_step`` can be reused in a plain loop."""
    if not isinstance(name, str) or not name:
        raise ConfigError(f"record_scalar name must be a non-empty string, got {name!r}")
    if (sink := getattr(_local, "sink", None)) is None:
        return
    try:
        sink.add(name, float(value))
    except (TypeError, ValueError):
        raise ConfigError(f"record_scalar({name!r}, ...) got {value!r}, not a number") from None


class ScalarSink:
    """Per-rank running sums and counts of recorded scalars (one per training thread)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, value: float) -> None:
        """Count ``value`` under ``name``; a NaN makes the epoch's mean NaN, as for the loss."""
        self.sums[name] = self.sums.get(name, 0.0) + value
        self.counts[name] = self.counts.get(name, 0) + 1

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        """The sums and counts so far, and start again."""
        out = (self.sums, self.counts)
        self.sums, self.counts = {}, {}
        return out

    def install(self) -> None:
        _local.sink = self

    @staticmethod
    def uninstall() -> None:
        _local.sink = None


@dataclass(frozen=True)
class RankMetrics:
    """One rank's share of an epoch.

    Attributes:
        rank: the global rank.
        host: its host name.
        device: its device, as a string (``"cpu"``, ``"cuda:1"``).
        loss: mean training loss over its batches (NaN if it ran none).
        batches: batches it trained.
        samples: samples it trained.
        throughput: samples per second over the epoch's wall time.
        compute_ms: time spent training (forward, backward, optimizer, slowdown sleep).
        sync_ms: time spent averaging.
        idle_ms: time spent waiting for other ranks.
        comm_bytes: bytes it handed to all-reduce (parameters and buffers; sync: gradients).
        peak_memory_bytes: ``torch.cuda.max_memory_allocated`` since it started (0: CPU, elastic).
    """

    rank: int
    host: str
    device: str
    loss: float
    batches: int
    samples: int
    throughput: float
    compute_ms: float
    sync_ms: float
    idle_ms: float
    comm_bytes: int = 0
    peak_memory_bytes: int = 0


@dataclass(frozen=True)
class EpochMetrics:
    """One epoch of a distributed run, as every rank saw it.

    Attributes:
        epoch: 0-based epoch number.
        avg_loss: mean training loss over every batch of every rank.
        epoch_ms: the epoch's wall time (the slowest rank's), training only (``eval_fn`` after).
        scalars: per name, the mean of every :func:`record_scalar` call this epoch.
        per_rank: one :class:`RankMetrics` per rank, in rank order.
        per_rank_throughput: samples per second of each rank.
        per_rank_batch_share: each rank's fraction of the epoch's batches (they sum to 1).
        syncs: averaging rounds this epoch (sync mode: optimizer steps).
        avg_sync_ms: mean duration of an averaging round (the slowest rank's).
        eval: what ``eval_fn`` returned after the epoch on the ``eval_on`` rank (``None`` without).
        anchor: ElChe's anchor at the end of the epoch (``None`` in sync mode).
        lr: rank 0's learning rate (first parameter group) at the end of the epoch.
        counts: ElChe's batch counts per rank for the next window (``None`` in sync mode).
    """

    epoch: int
    avg_loss: float
    epoch_ms: float
    scalars: dict[str, float] = field(default_factory=dict)
    per_rank: list[RankMetrics] = field(default_factory=list)
    per_rank_throughput: list[float] = field(default_factory=list)
    per_rank_batch_share: list[float] = field(default_factory=list)
    syncs: int = 0
    avg_sync_ms: float = 0.0
    eval: float | dict[str, float] | None = None
    anchor: int | None = None
    lr: float = math.nan
    counts: list[int] | None = None

    def monitor_values(self) -> dict[str, float]:
        """The numbers an epoch line shows: loss, recorded scalars, eval, lr."""
        out: dict[str, float] = {"loss": self.avg_loss}
        out.update(self.scalars)
        if isinstance(self.eval, Mapping):
            out.update({f"eval_{k}": float(v) for k, v in self.eval.items()})
        elif self.eval is not None:
            out["eval"] = float(self.eval)
        if math.isfinite(self.lr):
            out["lr"] = self.lr
        return out


@dataclass(frozen=True)
class Progress:
    """A report within an epoch (``reports_per_epoch``): the loss curve between epoch points.

    Attributes:
        epoch: the epoch it belongs to.
        fraction: the share of the epoch's batches trained so far, in (0, 1).
        loss: mean training loss of the epoch so far (every rank's; sync: rank 0's).
        samples: samples trained so far in the epoch, every rank together.
    """

    epoch: int
    fraction: float
    loss: float
    samples: int

    @property
    def step(self) -> float:
        """Where it falls on the epoch axis: ``epoch + fraction``."""
        return self.epoch + self.fraction


def rank_path(host: str, rank: int) -> str:
    """The record-tree leaf of a rank: ``root/<host>/rank<r>`` (host made path-safe)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in host) or "host"
    return f"root/{safe}/rank{rank}"


_LEAF_VALUES = ("loss", "throughput", "batches", "samples", "compute_ms", "sync_ms", "idle_ms")


def publish(monitor: Any, m: EpochMetrics) -> None:
    """Hand one epoch to a :class:`flodl_monitor.Monitor`: every rank as a leaf of the record tree
    (which the run owns: the monitor's ``record_path`` is switched off), then the epoch line."""
    monitor.record_path = None
    for r in m.per_rank:
        values = {k: float(getattr(r, k)) for k in _LEAF_VALUES}
        monitor.records.publish(rank_path(r.host, r.rank), values, step=m.epoch)
    if m.epoch < monitor.total:
        monitor.log(m.epoch, m.epoch_ms / 1000.0, m.monitor_values())


def close_ranks(monitor: Any, metrics: list[EpochMetrics]) -> None:
    """Mark every rank leaf finished so a quiet, completed rank is not reported lost."""
    for r in metrics[-1].per_rank if metrics else []:
        if (path := rank_path(r.host, r.rank)) in monitor.records:
            monitor.records.close(path)


def combine_ranks(
    epoch: int,
    tally: EpochTally,
    batch_size: int,
    lr: float,
    anchor: int | None,
    counts: list[int] | None,
) -> EpochMetrics:
    """One :class:`EpochMetrics` from every rank's epoch sums (the same on every rank):
    ``tally.ranks[r]`` holds ``host, device, loss_sum, loss_n, batches, compute, sync, idle,
    wall`` (seconds), ``sums`` / ``counts`` of the scalars; ``tally.sync_ms``: each round's
    slowest rank. ``anchor`` and ``counts`` (ElChe's next window): ``None`` in sync mode."""
    ranks = tally.ranks
    epoch_s = max(d["wall"] for d in ranks)
    total_batches = sum(d["batches"] for d in ranks) or 1
    per_rank = []
    for r, d in enumerate(ranks):  # RankMetrics' fields in order
        n = int(d["batches"])
        loss = d["loss_sum"] / d["loss_n"] if d["loss_n"] else math.nan
        head = (r, d["host"], d["device"], loss, n, n * batch_size)
        rate = n * batch_size / epoch_s if epoch_s > 0 else 0.0
        ms = [d[k] * 1000.0 for k in ("compute", "sync", "idle")]
        tail = (int(d.get("comm_bytes", 0)), int(d.get("peak_memory", 0)))
        per_rank.append(RankMetrics(*head, rate, *ms, *tail))
    loss_n = sum(d["loss_n"] for d in ranks)
    scal_sum, scal_n = Counter[str](), Counter[str]()
    for d in ranks:
        scal_sum.update(d["sums"])
        scal_n.update(d["counts"])
    return EpochMetrics(
        epoch=epoch,
        avg_loss=sum(d["loss_sum"] for d in ranks) / loss_n if loss_n else math.nan,
        epoch_ms=epoch_s * 1000.0,
        scalars={k: scal_sum[k] / scal_n[k] for k in sorted(scal_sum)},
        per_rank=per_rank,
        per_rank_throughput=[p.throughput for p in per_rank],
        per_rank_batch_share=[d["batches"] / total_batches for d in ranks],
        syncs=tally.syncs,
        avg_sync_ms=sum(tally.sync_ms) / len(tally.sync_ms) if tally.sync_ms else 0.0,
        eval=tally.eval,
        anchor=anchor,
        lr=lr,
        counts=counts,
    )


def run_eval(model: Any, eval_fn: Any) -> float | dict[str, float]:
    """``eval_fn(model)`` in eval mode without gradients (the training mode is restored), as a
    float or a dict of floats: what :attr:`EpochMetrics.eval` holds."""
    import torch

    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = eval_fn(model)
    finally:
        model.train(was)
    return {str(k): float(v) for k, v in out.items()} if isinstance(out, dict) else float(out)
