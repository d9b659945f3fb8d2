"""What a distributed run is asked to do: :class:`TrainerConfig` and :class:`DdpConfig`.

Both are plain dataclasses with the default next to each field, so a run can be described in
code, built from a dict (``TrainerConfig(**yaml.safe_load(...)["ddp"])``) or assembled by the
builder (every builder method sets one field). :func:`check_config` validates everything before
a process is started; each error names the field, the value and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from flodl_core import ConfigError

from ._modes import Mode, parse_mode

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
    lr_scale_ratio: float = 1.0
    seed: int = 42
    batches_per_epoch: int | None = None
    timeline: bool = False
    slowdown: Mapping[int, float] | None = None
    timeout_s: float = 300.0


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
            (``None``: automatic, see :mod:`flodl_ddp._policy`).
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
            ``1 + lr_scale_ratio * (world_size - 1)`` (the linear scaling rule; 0 turns it off).
        seed: seeds the model initialisation, the per-epoch data order and each rank's RNG.
        batches_per_epoch: a cap on the batches of all ranks together in one epoch.
        eval_fn: ``fn(model) -> float | dict[str, float]``, on rank 0 after each epoch.
        metrics_fn: ``fn(EpochMetrics)`` in the launching process after each epoch.
        monitor: a :class:`flodl_monitor.Monitor` that receives every epoch and every rank.
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


# ---- validation --------------------------------------------------------------------------------


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_bool(name: str, value: object) -> bool:
    """``value`` if it is ``True`` or ``False`` (a switch given ``"no"`` would read as on)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")
    return value


def check_int(name: str, value: object, low: int, *, optional: bool = False) -> None:
    """``value`` must be an int >= ``low`` (or ``None`` when ``optional``)."""
    if optional and value is None:
        return
    if not _is_int(value) or value < low:  # type: ignore[operator]
        extra = " or None" if optional else ""
        raise ConfigError(f"{name} must be an int >= {low}{extra}, got {value!r}")


def check_float(
    name: str,
    value: object,
    low: float,
    high: float = math.inf,
    *,
    low_open: bool = False,
    optional: bool = False,
) -> None:
    """``value`` must be a finite number in ``[low, high]`` (``(low, high]`` if ``low_open``)."""
    if optional and value is None:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(v) and (v > low if low_open else v >= low) and v <= high
    if not ok:
        lo = "(" if low_open else "["
        hi = "inf)" if math.isinf(high) else f"{high}]"
        extra = " or None" if optional else ""
        raise ConfigError(f"{name} must be a number in {lo}{low}, {hi}{extra}, got {value!r}")


def check_callable(name: str, value: object, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not callable(value):
        raise ConfigError(f"{name} must be callable, got {type(value).__name__} {value!r}")


def check_slowdown(value: object) -> dict[int, float]:
    """``{rank: factor >= 1}`` as a plain dict."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"slowdown must be a dict {{rank: factor}}, got {value!r}")
    out: dict[int, float] = {}
    for rank, factor in value.items():
        check_int("slowdown rank", rank, 0)
        check_float(f"slowdown[{rank}]", factor, 1.0)
        out[int(rank)] = float(factor)
    return out


def check_config(cfg: TrainerConfig, *, need_epochs: bool = True) -> Mode:
    """Validate every field; returns the parsed mode. Raises :class:`ConfigError` naming the
    first bad field. ``need_epochs=False``: ``num_epochs`` may be ``None`` (cooperative tier)."""
    mode = parse_mode(cfg.mode)
    if cfg.dataset is None:
        raise ConfigError("dataset is required: call .dataset(ds) (any DataLoader input)")
    check_int("batch_size", cfg.batch_size, 1)
    check_int("num_epochs", cfg.num_epochs, 1, optional=not need_epochs)
    for flag in ("bf16_wire", "shared_memory", "meta_controller", "elche_relax_up", "timeline"):
        check_bool(flag, getattr(cfg, flag))
    check_int("anchor", cfg.anchor, 1)
    check_int("max_anchor", cfg.max_anchor, 1)
    check_int("min_anchor", cfg.min_anchor, 1, optional=True)
    if cfg.max_anchor < cfg.anchor:
        raise ConfigError(f"max_anchor ({cfg.max_anchor}) must be >= anchor ({cfg.anchor})")
    check_float("overhead_target", cfg.overhead_target, 0.01, 0.50)
    check_int("max_batch_diff", cfg.max_batch_diff, 0, optional=True)
    check_float("max_grad_norm", cfg.max_grad_norm, 0.0, low_open=True, optional=True)
    check_int("max_overshoot", cfg.max_overshoot, 0, optional=True)
    check_float("divergence_threshold", cfg.divergence_threshold, 0.0, low_open=True)
    check_float("easgd_alpha", cfg.easgd_alpha, 0.0, 1.0, low_open=True, optional=True)
    if cfg.easgd_alpha is not None and mode.name != "cpu-async":
        raise ConfigError(
            f"easgd_alpha applies to mode 'cpu-async' only, but the mode is {mode.name!r}; "
            "drop easgd_alpha or use .mode('cpu-async')"
        )
    check_float("lr_scale_ratio", cfg.lr_scale_ratio, 0.0)
    check_int("seed", cfg.seed, 0)
    check_int("batches_per_epoch", cfg.batches_per_epoch, 1, optional=True)
    check_callable("scheduler", cfg.scheduler, optional=True)
    check_callable("eval_fn", cfg.eval_fn, optional=True)
    check_callable("metrics_fn", cfg.metrics_fn, optional=True)
    check_int("checkpoint_every", cfg.checkpoint_every, 1, optional=True)
    if cfg.checkpoint_every is not None and not cfg.checkpoint_path:
        raise ConfigError("checkpoint_every needs a checkpoint_path (a folder)")
    check_int("threads_per_rank", cfg.threads_per_rank, 1, optional=True)
    check_bool("bind_cores", cfg.bind_cores)
    check_float("timeout_s", cfg.timeout_s, 0.0, low_open=True)
    check_slowdown(cfg.slowdown)
    check_speed_hint(cfg.speed_hint)
    check_partition_ratios(cfg.partition_ratios)
    return mode


def check_speed_hint(hint: Any) -> None:
    """``speed_hint``: ``None`` or ``(slow_rank, ratio)`` with rank >= 0 and ratio >= 1."""
    if hint is None:
        return
    if not isinstance(hint, (tuple, list)) or len(hint) != 2:
        raise ConfigError(f"speed_hint must be (slow_rank, ratio), got {hint!r}")
    check_int("speed_hint rank", hint[0], 0)
    check_float("speed_hint ratio", hint[1], 1.0)


def check_partition_ratios(ratios: Any) -> None:
    """``partition_ratios``: ``None`` or a non-empty list of positive numbers."""
    if ratios is None:
        return
    if isinstance(ratios, (str, bytes)) or not isinstance(ratios, Sequence) or not ratios:
        raise ConfigError(f"partition_ratios must be a list of numbers, got {ratios!r}")
    for i, r in enumerate(ratios):
        check_float(f"partition_ratios[{i}]", r, 0.0, low_open=True)


def check_world(cfg: TrainerConfig, world_size: int) -> None:
    """The checks that need the world size."""
    for rank in check_slowdown(cfg.slowdown):
        if rank >= world_size:
            raise ConfigError(f"slowdown names rank {rank} but the world has {world_size} ranks")
    if cfg.speed_hint is not None and cfg.speed_hint[0] >= world_size:
        raise ConfigError(
            f"speed_hint names rank {cfg.speed_hint[0]} but the world has {world_size} ranks"
        )
    if cfg.partition_ratios is not None and len(cfg.partition_ratios) != world_size:
        raise ConfigError(
            f"partition_ratios has {len(cfg.partition_ratios)} entries for {world_size} ranks; "
            "give one ratio per rank"
        )
