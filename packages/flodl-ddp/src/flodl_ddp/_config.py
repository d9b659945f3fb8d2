"""What a distributed run is asked to do: :class:`TrainerConfig` and :class:`DdpConfig`.

Both are plain dataclasses with the default next to each field, so a run can be described in
code, built from a dict (``TrainerConfig(**yaml.safe_load(...)["ddp"])``) or assembled by the
builder (every builder method sets one field). Each field is checked by one rule
(:mod:`flodl_ddp._options`) before a process is started; each error names the field, the value
and what was expected.
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

    Required: ``dataset``, ``batch_size``, ``num_epochs``. The three callables (model factory,
    optimizer factory, train step) are given to :meth:`Trainer.builder`, not here.

    Attributes:
        dataset: anything :class:`flodl_core.DataLoader` reads (a ``BatchDataSet``, a map-style
            dataset, a tuple of tensors). It is sent to every rank process.
        batch_size: samples per batch, per rank (> 0).
        num_epochs: epochs to train (> 0).
        devices: one entry per rank (``"cpu"``, ``"cuda:1"``, ``1``); ``None``: every GPU
            :func:`flodl_core.detect_gpus` sees, else one ``"cpu"`` rank.
        mode: one of the six modes (``"nccl-cadence"`` default; see :data:`flodl_ddp.MODES`).
        bf16_wire: send bfloat16 instead of float32 on the ``cpu`` backend (half the bytes).
        shared_memory: cadence / async with every rank on one machine and the averaging buffer
            in host memory (CPU ranks, or the ``cpu`` backend): average through a shared-memory
            file instead of gloo (a 2-rank round measured 3-7x faster on a 2-core host). The
            file holds one copy of the weights per rank, in ``/dev/shm``; when it does not fit
            there, or the ranks span several hosts, or with ``bf16_wire``, the ranks keep gloo.
            Their control counters (pool claims, "ready" and "stopped" counts) move to a small
            shared table as well, microseconds instead of a store round trip each (any mode
            but sync, any device, every rank on one host). ``False`` keeps gloo and the store.
        anchor: ElChe's initial anchor (batches of the slowest rank per averaging window).
        max_anchor: upper bound of the anchor's auto-tuning.
        min_anchor: lower bound (default: the initial anchor).
        overhead_target: averaging time / compute time ElChe aims for, in [0.01, 0.50].
        max_batch_diff: the most batches a fast rank may lead by (``0``: lockstep); ``None``: free.
        speed_hint: ``(slow_rank, ratio)``: seeds ElChe before it has measured anything.
        partition_ratios: fixed per-rank data shares instead of throughput-proportional ones.
        max_grad_norm: clip each rank's gradient norm to this before its optimizer step.
        max_overshoot: async only: the most extra batches a ready rank runs while it waits
            (``None``: automatic, see :mod:`flodl_ddp._gate`).
        divergence_threshold: the default :class:`TrendGuard`'s threshold.
        guard: a convergence guard object (``None``: ``TrendGuard(divergence_threshold)``).
        meta_controller: turn on the LR-aware meta-controller.
        elche_relax_up: after each averaging the guard calls stable, grow the anchor by one
            toward ``max_anchor`` (refused past ``max_batch_diff``).
        easgd_alpha: cpu-async only: blend ``W := (1-a) W + a W_avg`` instead of overwriting.
        outer_optimizer: applied to the consensus between averaging and write-back
            (``None``: plain averaging, :class:`OuterAvg`).
        scheduler: ``factory(optimizer, total_steps)`` returning a flodl
            :class:`~flodl_core.Scheduler` (driven by the global step) or any object with
            ``.step()`` (stepped once per global step). The global step counts the batches of
            all ranks together.
        lr_scale_ratio: every rank's learning rate is multiplied by
            ``1 + lr_scale_ratio * (world_size - 1)``. ``None`` (default): 1.0 in sync mode,
            whose step averages the gradients of every rank's batch (the linear scaling rule
            for the W-times larger pooled batch), 0.0 in cadence and async, whose replicas each
            step on their own batch as one device would. The start-up line prints the result.
        seed: seeds the model initialisation, the per-epoch data order and each rank's RNG.
        batches_per_epoch: a cap on the batches of all ranks together in one epoch.
        reports_per_epoch: besides each epoch's metrics, this many progress reports within
            an epoch (loss and samples so far; ``DdpHandle.reports``, and the monitor's record
            tree): the loss curve between epoch points. 0 (default): none.
        eval_on: which rank runs ``eval_fn``: ``"fastest"`` (default: the rank ElChe measured
            fastest, which finishes it soonest on a mixed rig; rank 0 before any measurement)
            or a rank number.
        eval_fn: ``fn(model) -> float | dict[str, float]``, after each epoch (see ``eval_on``).
        metrics_fn: ``fn(EpochMetrics)`` in the launching process after each epoch.
        monitor: a :class:`flodl_monitor.Monitor` that receives every epoch and every rank.
        record_log: a folder: the run's record tree as JSONL files (one per node, see
            :meth:`flodl_monitor.Monitor.record_log`); a silent monitor is made if none is set.
        save_dashboard: a file: the whole dashboard as one offline HTML file, written when the
            run ends.
        timeline: record per-rank compute / sync / idle spans (``DdpHandle.timeline()``).
        checkpoint_every: write a checkpoint every this many epochs (needs
            ``checkpoint_path``).
        checkpoint_path: the checkpoint folder.
        resume: a checkpoint folder to continue from.
        slowdown: testing aid: ``{rank: factor}`` makes each batch of that rank take
            ``factor`` times its usual batch time (simulates a slower device on a uniform
            machine; the rank sleeps the extra time in pieces, see ``flodl_ddp._slowdown``).
        threads_per_rank: torch threads per rank (default 1 on CPU ranks, torch's own on GPU).
            With one device the run trains on a thread of the calling process; the count is
            then set on that thread only, and only when given.
        bind_cores: bind each rank process of a host to its own equal slice of the cores this
            process may use (Linux; see ``flodl_ddp._affinity``). Off by default.
        timeout_s: how long a collective or a rendezvous may wait before the run fails.
        elastic: :class:`~flodl_ddp._elastic.ElasticOptions` when ranks may die and come back
            (``None``: a fixed world; see :meth:`TrainerBuilder.elastic`).
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
    """The cooperative tier's options (:meth:`Trainer.setup`): the run's data and cadence; the
    user owns the loop. Fields mean what they mean in :class:`TrainerConfig`.

    ``dataset`` and ``batch_size`` are required for ``session.epoch(n)``.
    """

    def to_trainer_config(self) -> TrainerConfig:
        """The same options as a :class:`TrainerConfig` (fields it lacks keep their defaults)."""
        return TrainerConfig(**{f.name: getattr(self, f.name) for f in fields(self)})
