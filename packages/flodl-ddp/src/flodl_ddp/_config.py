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
    num_workers: int = 0
    micro_batches: int = 1
    num_epochs: int | None = None
    mode: str | Mode = "nccl-cadence"
    bf16_wire: bool = False
    shared_memory: bool = True
    find_unused_parameters: bool = False
    anchor: int = 10
    max_anchor: int = 1000
    min_anchor: int | None = None
    overhead_target: float = 0.05
    max_batch_diff: int | None = None
    speed_hint: tuple[int, float] | None = None
    partition_ratios: Sequence[float] | None = None
    max_grad_norm: float | None = None
    grad_scaler: bool = False
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
    """Every option of a managed run (:meth:`Trainer.builder`, which takes the factories and the
    train step), with its default; required: ``dataset``, ``batch_size``, ``num_epochs``. Each
    field is documented on the :class:`~flodl_ddp.TrainerBuilder` method of the same name
    (``timeout_s``: ``timeout``; ``checkpoint_path``: ``checkpoint_every``'s ``path``), which
    sets it through the same rule."""

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
