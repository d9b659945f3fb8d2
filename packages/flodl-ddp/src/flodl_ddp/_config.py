"""What a distributed run is asked to do: :class:`TrainerConfig` and :class:`DdpConfig`, plain
dataclasses (written in code, built from a dict, or set by the builder one field per method),
each field checked by one rule of :mod:`flodl_ddp._options` before a process starts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ._modes import Mode

Factory = Callable[..., Any]


@dataclass
class _RunOptions:
    """The options both tiers share (documented on :class:`TrainerConfig`)."""

    dataset: Any = None
    batch_size: int | None = None
    num_epochs: int | None = None
    mode: str | Mode = "nccl-cadence"
    bf16_wire: bool = False
    shared_memory: bool = True
    anchor: int = 10
    max_anchor: int = 1000
    min_anchor: int | None = None
    overhead_target: float = 0.10
    max_batch_diff: int | None = None
    speed_hint: tuple[int, float] | None = None
    partition_ratios: Sequence[float] | None = None
    max_grad_norm: float | None = None
    max_overshoot: int | None = None
    divergence_threshold: float = 0.05
    guard: Any = None
    meta_controller: bool = False
    elche_relax_up: bool = False
    easgd_alpha: float | None = None
    outer_optimizer: Any = None
    scheduler: Factory | None = None
    lr_scale_ratio: float | None = None
    seed: int = 42
    batches_per_epoch: int | None = None
    timeline: bool = False
    slowdown: Mapping[int, float] | None = None
    timeout_s: float = 300.0
    reports_per_epoch: int = 0
    eval_on: str | int = "fastest"


@dataclass
class TrainerConfig(_RunOptions):
    """Every option of a managed run (:meth:`Trainer.builder`), with its default.

    Required: ``dataset``, ``batch_size``, ``num_epochs``; the model factory, optimizer factory
    and train step are given to :meth:`Trainer.builder`.

    Attributes:
        dataset: what :class:`flodl_core.DataLoader` reads (``BatchDataSet``, map-style, tensors).
        batch_size: samples per batch, per rank (> 0).
        num_epochs: epochs to train (> 0).
        devices: one entry per rank (``"cpu"``, ``"cuda:1"``, ``1``); ``None``: every GPU
            :func:`flodl_core.detect_gpus` sees, else one ``"cpu"`` rank.
        mode: one of the six modes (``"nccl-cadence"`` default; see :data:`flodl_ddp.MODES`).
        bf16_wire: send bfloat16 instead of float32 on the ``cpu`` backend (half the bytes).
        shared_memory: cadence / async, one host, averaging in host memory (CPU ranks or the
            ``cpu`` backend): average through a file in ``/dev/shm`` instead of gloo (which stays
            when it does not fit, across hosts, with ``bf16_wire``, or when ``False``).
        anchor: ElChe's initial anchor (batches of the slowest rank per averaging window).
        max_anchor: upper bound of the anchor's auto-tuning.
        min_anchor: lower bound (default: the initial anchor).
        overhead_target: averaging time / compute time ElChe aims for, in [0.01, 0.50].
        max_batch_diff: the most batches a fast rank may lead by (``0``: lockstep); ``None``: free.
        speed_hint: ``(slow_rank, ratio)``: seeds ElChe before it has measured anything.
        partition_ratios: fixed per-rank data shares instead of throughput-proportional ones.
        max_grad_norm: clip each rank's gradient norm to this before its optimizer step.
        max_overshoot: async: the most extra batches a ready rank runs waiting (``None``: auto).
        divergence_threshold: the default :class:`TrendGuard`'s threshold.
        guard: a convergence guard object (``None``: ``TrendGuard(divergence_threshold)``).
        meta_controller: turn on the LR-aware meta-controller.
        elche_relax_up: after each averaging the guard calls stable, grow the anchor by one
            toward ``max_anchor`` (refused past ``max_batch_diff``).
        easgd_alpha: cpu-async only: blend ``W := (1-a) W + a W_avg`` instead of overwriting.
        outer_optimizer: applied to the consensus before write-back (``None``: :class:`OuterAvg`).
        scheduler: ``factory(optimizer, total_steps)`` returning a :class:`~flodl_core.Scheduler`
            or anything with ``.step()``, driven by the global step (all ranks' batches).
        lr_scale_ratio: every rank's learning rate is multiplied by ``1 + lr_scale_ratio *
            (world_size - 1)``; ``None``: 1.0 in sync mode (linear scaling for its pooled
            batch), 0.0 in cadence and async.
        seed: seeds the model initialisation, the per-epoch data order and each rank's RNG.
        batches_per_epoch: a cap on the batches of all ranks together in one epoch.
        reports_per_epoch: progress reports per epoch (``DdpHandle.reports``); 0: none.
        eval_on: the rank that runs ``eval_fn``: a number or ``"fastest"`` (ElChe's; first: 0).
        eval_fn: ``fn(model) -> float | dict[str, float]``, after each epoch (see ``eval_on``).
        metrics_fn: ``fn(EpochMetrics)`` in the launching process after each epoch.
        monitor: a :class:`flodl_monitor.Monitor` that receives every epoch and every rank.
        record_log: a folder for the record tree as JSONL (``Monitor.record_log``; any monitor).
        save_dashboard: a file: the whole dashboard as one offline HTML page, at the run's end.
        timeline: record per-rank compute / sync / idle spans (``DdpHandle.timeline()``).
        checkpoint_every: write a checkpoint every this many epochs (needs ``checkpoint_path``).
        checkpoint_path: the checkpoint folder.
        resume: a checkpoint folder to continue from.
        slowdown: testing aid: ``{rank: factor}``: its batches take ``factor`` times as long.
        threads_per_rank: torch threads per rank (default 1 on CPU ranks, torch's own on GPU;
            one device: set on the calling thread only when given).
        bind_cores: bind each rank process of a host to an equal slice of the usable cores
            (Linux; see ``flodl_ddp._affinity``).
        timeout_s: how long a collective or a rendezvous may wait before the run fails.
        elastic: :class:`ElasticOptions` when ranks may die and come back (``None``: fixed world).
    """

    devices: Sequence[Any] | None = None
    eval_fn: Factory | None = None
    metrics_fn: Callable[[Any], None] | None = None
    monitor: Any = None
    record_log: str | None = None
    save_dashboard: str | None = None
    checkpoint_every: int | None = None
    checkpoint_path: str | None = None
    resume: str | None = None
    threads_per_rank: int | None = None
    bind_cores: bool = False
    elastic: Any = None


@dataclass
class DdpConfig(_RunOptions):
    """The cooperative tier's options (:meth:`Trainer.setup`; the user owns the loop), as in
    :class:`TrainerConfig`; ``session.epoch(n)`` needs ``dataset`` and ``batch_size``."""

    def to_trainer_config(self) -> TrainerConfig:
        """The same options as a :class:`TrainerConfig` (fields it lacks keep their defaults)."""
        return TrainerConfig(**{f.name: getattr(self, f.name) for f in fields(self)})
