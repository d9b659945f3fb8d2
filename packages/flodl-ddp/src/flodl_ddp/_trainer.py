"""The entry points: ``Trainer.builder(...)`` (managed: the framework owns the loop) and
``Trainer.setup(...)`` (cooperative: you own it). Each builder method sets, and documents, one
field of :class:`~flodl_ddp.TrainerConfig` through that field's one rule
(:mod:`flodl_ddp._options`); docs/tutorials/11-multi-gpu.md shows a whole run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from typing import Any

from torch import nn

from flodl_core import ConfigError

from ._config import DdpConfig, TrainerConfig
from ._elastic import ElasticOptions, check_elastic, require_torchft
from ._elche_config import ElCheConfig
from ._guards import NoGuard
from ._handle import DdpHandle
from ._launch import start
from ._modes import Backend, Mode, Policy, parse_mode
from ._options import _callable, check_option
from ._session import DdpSession


class TrainerBuilder:
    """Chained options of a managed run; :meth:`run` starts it. Each method checks its
    argument at once (a :class:`~flodl_core.ConfigError` names it) and returns the builder.
    Required: :meth:`dataset`, :meth:`batch_size`, :meth:`num_epochs`."""

    def __init__(
        self,
        model_factory: Callable[..., nn.Module],
        optim_factory: Callable[..., Any],
        train_step: Callable[..., Any],
    ) -> None:
        self._factories = (model_factory, optim_factory, train_step)
        names = ("model_factory", "optim_factory", "train_step")
        for name, fn in zip(names, self._factories, strict=True):
            _callable(name)(fn)
        self._cfg = TrainerConfig()

    def _set(self, name: str, value: Any) -> TrainerBuilder:
        self._cfg = replace(self._cfg, **{name: check_option(name, value)})
        return self

    def dataset(self, ds: Any) -> TrainerBuilder:
        """The training data: anything :class:`flodl_core.DataLoader` reads (``BatchDataSet``,
        map-style, a tensor or a tuple / dict of tensors)."""
        if ds is None:
            raise ConfigError("dataset must not be None")
        return self._set("dataset", ds)

    def batch_size(self, n: int) -> TrainerBuilder:
        """Samples per batch, per rank (> 0)."""
        return self._set("batch_size", n)

    def micro_batches(self, k: int) -> TrainerBuilder:
        """Cut each batch into ``k`` parts trained one by one, their gradients added up before
        one optimizer step (gradient accumulation: ``batch_size / k`` samples in memory)."""
        return self._set("micro_batches", k)

    def num_workers(self, n: int) -> TrainerBuilder:
        """Threads per rank reading streamed batches side by side (map-style datasets stream;
        :class:`flodl_core.DataLoader`'s option; default 0: one background thread)."""
        return self._set("num_workers", n)

    def num_epochs(self, n: int) -> TrainerBuilder:
        """Epochs to train (> 0)."""
        return self._set("num_epochs", n)

    def batches_per_epoch(self, n: int) -> TrainerBuilder:
        """Cap the batches of all ranks together in one epoch."""
        return self._set("batches_per_epoch", n)

    def seed(self, n: int) -> TrainerBuilder:
        """Seed of the model initialisation, data order and per-rank RNG (default 42)."""
        return self._set("seed", n)

    def devices(self, devices: Sequence[Any]) -> TrainerBuilder:
        """One device per rank: ``["cuda:0", "cuda:1"]``, ``["cpu"] * 2``. Default: every GPU
        found without initialising CUDA, else one CPU rank."""
        return self._set("devices", devices)

    def mode(self, mode: str | Mode) -> TrainerBuilder:
        """One of :data:`~flodl_ddp.MODES` (default ``nccl-cadence``; ``_`` for ``-``, any case)."""
        return self._set("mode", mode)

    def policy(self, policy: Policy | str) -> TrainerBuilder:
        """Change only the policy (sync / cadence / async), keeping the backend."""
        p = policy if isinstance(policy, Policy) else _enum(Policy, "policy", policy)
        return self._set("mode", Mode(p, parse_mode(self._cfg.mode).backend))

    def backend(self, backend: Backend | str) -> TrainerBuilder:
        """Change only the backend (nccl / cpu), keeping the policy."""
        b = backend if isinstance(backend, Backend) else _enum(Backend, "backend", backend)
        return self._set("mode", Mode(parse_mode(self._cfg.mode).policy, b))

    def bf16_wire(self, on: bool = True) -> TrainerBuilder:
        """cpu backend: send bfloat16 over gloo (half the bytes, sums rounded to bf16)."""
        return self._set("bf16_wire", on)

    def shared_memory(self, on: bool = True) -> TrainerBuilder:
        """Same-host cadence / async averaging through a file in ``/dev/shm`` instead of gloo
        (default on; gloo stays when it does not fit, across hosts and with ``bf16_wire``)."""
        return self._set("shared_memory", on)

    def find_unused_parameters(self, on: bool = True) -> TrainerBuilder:
        """Sync: let a step leave parameters out of the loss (a branch not taken, a head not
        used), as DDP's option of that name does, at the price of a walk of the graph a step."""
        return self._set("find_unused_parameters", on)

    def threads_per_rank(self, n: int) -> TrainerBuilder:
        """torch threads per rank (default 1 on CPU ranks; with one device, on its thread only)."""
        return self._set("threads_per_rank", n)

    def bind_cores(self, on: bool = True) -> TrainerBuilder:
        """Bind each rank process to its own equal slice of this host's usable cores (Linux)."""
        return self._set("bind_cores", on)

    def anchor(self, n: int) -> TrainerBuilder:
        """Initial anchor: batches the slowest rank runs per averaging window (default 10)."""
        return self._set("anchor", n)

    def max_anchor(self, n: int) -> TrainerBuilder:
        """Upper bound of the anchor's auto-tuning (default 1000)."""
        return self._set("max_anchor", n)

    def min_anchor(self, n: int) -> TrainerBuilder:
        """Lower bound of the anchor's auto-tuning (default: the initial anchor)."""
        return self._set("min_anchor", n)

    def overhead_target(self, f: float) -> TrainerBuilder:
        """Averaging time over compute time ElChe aims for, in [0.01, 0.50] (default 0.05)."""
        return self._set("overhead_target", f)

    def max_batch_diff(self, n: int) -> TrainerBuilder:
        """The most batches a fast rank may lead by; 0 = lockstep (default: no limit)."""
        return self._set("max_batch_diff", n)

    def speed_hint(self, slow_rank: int, ratio: float) -> TrainerBuilder:
        """Before measuring: ``slow_rank`` is the slowest and the others ``ratio`` times faster."""
        return self._set("speed_hint", (slow_rank, ratio))

    def partition_ratios(self, ratios: Sequence[float]) -> TrainerBuilder:
        """Fixed per-rank data shares (one per rank) instead of throughput-proportional ones."""
        return self._set("partition_ratios", ratios)

    def max_overshoot(self, n: int) -> TrainerBuilder:
        """async: the most extra batches a ready rank runs while waiting (default automatic)."""
        return self._set("max_overshoot", n)

    def max_grad_norm(self, f: float) -> TrainerBuilder:
        """Clip each rank's gradient norm to ``f`` before its optimizer step."""
        return self._set("max_grad_norm", f)

    def grad_scaler(self, on: bool = True) -> TrainerBuilder:
        """float16 autocast: each rank scales its loss (``torch.amp.GradScaler``), unscales before
        clipping, and skips a step whose gradients hold inf / NaN (the scale is then halved)."""
        return self._set("grad_scaler", on)

    def divergence_threshold(self, f: float) -> TrainerBuilder:
        """Threshold of the default ``TrendGuard`` (default 0.05)."""
        return self._set("divergence_threshold", f)

    def guard(self, guard: Any) -> TrainerBuilder:
        """The convergence guard: ``TrendGuard(divergence_threshold)`` (default), ``MsfGuard``,
        ``NoGuard`` or your own."""
        return self._set("guard", guard)

    def no_divergence_guard(self) -> TrainerBuilder:
        """Use ``NoGuard``: the anchor may grow whatever the divergence."""
        return self._set("guard", NoGuard())

    def meta_controller(self, on: bool = True) -> TrainerBuilder:
        """Turn on the LR-aware meta-controller (shrinks the anchor at LR cliffs)."""
        return self._set("meta_controller", on)

    def elche_relax_up(self, on: bool = True) -> TrainerBuilder:
        """Grow the anchor by one after each averaging the guard calls stable (toward
        ``max_anchor``; refused past ``max_batch_diff``)."""
        return self._set("elche_relax_up", on)

    def easgd_alpha(self, alpha: float) -> TrainerBuilder:
        """cpu-async only: ``W := (1 - alpha) W + alpha W_avg`` at each averaging, in (0, 1]."""
        return self._set("easgd_alpha", alpha)

    def outer_optimizer(self, outer: Any) -> TrainerBuilder:
        """Applied to the consensus before write-back: ``OuterAvg`` (default), ``SlowMo``,
        ``DiLoCo``, ``TorchOuter``."""
        return self._set("outer_optimizer", outer)

    def scheduler(self, factory: Callable[..., Any]) -> TrainerBuilder:
        """``factory(optimizer, total_steps)`` -> a ``Scheduler`` or an object with ``.step()``,
        driven by the global step (every rank's batches)."""
        return self._set("scheduler", factory)

    def lr_scale_ratio(self, f: float) -> TrainerBuilder:
        """lr times ``1 + f * (world_size - 1)`` (default 1.0 in sync mode, else 0.0)."""
        return self._set("lr_scale_ratio", f)

    def eval_fn(self, fn: Callable[[nn.Module], Any]) -> TrainerBuilder:
        """``fn(model) -> float | dict`` after each epoch, on the rank :meth:`eval_on` names."""
        return self._set("eval_fn", fn)

    def metrics_fn(self, fn: Callable[[Any], None]) -> TrainerBuilder:
        """``fn(EpochMetrics)`` in the launching process after each epoch (errors are logged)."""
        return self._set("metrics_fn", fn)

    def monitor(self, monitor: Any) -> TrainerBuilder:
        """A :class:`flodl_monitor.Monitor`: an epoch line per epoch, every rank in its tree."""
        return self._set("monitor", monitor)

    def timeline(self, on: bool = True) -> TrainerBuilder:
        """Record per-rank compute / sync / idle spans; read them with ``handle.timeline()``."""
        return self._set("timeline", on)

    def checkpoint_every(self, n_epochs: int, path: str) -> TrainerBuilder:
        """Rank 0 writes a checkpoint to folder ``path`` every ``n_epochs`` epochs."""
        return self._set("checkpoint_every", n_epochs)._set("checkpoint_path", path)

    def resume(self, path: str) -> TrainerBuilder:
        """Continue from the checkpoint folder ``path`` (same number of ranks)."""
        return self._set("resume", path)

    def slowdown(self, factors: Mapping[int, float]) -> TrainerBuilder:
        """Testing aid: ``{rank: factor}`` makes that rank take ``factor`` times its batch time."""
        return self._set("slowdown", factors)

    def timeout(self, seconds: float) -> TrainerBuilder:
        """How long a collective or the rendezvous may wait before the run fails (default 300)."""
        return self._set("timeout_s", seconds)

    def reports_per_epoch(self, n: int) -> TrainerBuilder:
        """``n`` progress reports per epoch (loss, samples so far) into ``DdpHandle.reports``."""
        return self._set("reports_per_epoch", n)

    def eval_on(self, rank: str | int) -> TrainerBuilder:
        """Which rank runs ``eval_fn``: ``"fastest"`` (default; 0 before ElChe knows) or a rank."""
        return self._set("eval_on", rank)

    def record_log(self, directory: str) -> TrainerBuilder:
        """Write the run's record tree as JSONL files under ``directory`` as it grows."""
        return self._set("record_log", directory)

    def save_dashboard(self, path: str) -> TrainerBuilder:
        """Write the whole dashboard as one offline HTML file when the run ends."""
        return self._set("save_dashboard", path)

    def elastic(
        self,
        min_ranks: int = 1,
        heartbeat_timeout: float = 1.0,
        hang_timeout: float = 60.0,
        *,
        max_restarts: int = 0,
        trusted_interface: str | None = None,
        host: str = "127.0.0.1",
    ) -> TrainerBuilder:
        """Ranks may die and come back (needs ``pip install flodl-ddp[ft]``, mode
        ``cpu-cadence``): survivors take over a dead rank's data, a restarted rank heals from a
        living one, a hung rank is killed after ``hang_timeout`` seconds without a batch. Fewer
        than ``min_ranks`` living ranks fail the run. Everything binds loopback unless
        ``trusted_interface`` names a network you trust. See :mod:`flodl_ddp._elastic`."""
        opts = ElasticOptions(
            min_ranks, heartbeat_timeout, hang_timeout, max_restarts, trusted_interface, host
        )
        check_elastic(opts, max(min_ranks, 1) if isinstance(min_ranks, int) else 1)
        require_torchft()
        return self._set("elastic", opts)

    def elche(self, config: Any) -> TrainerBuilder:
        """The mode and every ElChe knob an :class:`~flodl_ddp.ElCheConfig` names."""
        if not isinstance(config, ElCheConfig):
            raise ConfigError(f"elche needs an ElCheConfig, got {type(config).__name__}")
        return self._set_all(config.options())

    def config(self, cfg: TrainerConfig) -> TrainerBuilder:
        """Take every option from a :class:`TrainerConfig` (replacing what was set before)."""
        if not isinstance(cfg, TrainerConfig):
            raise ConfigError(f"config must be a TrainerConfig, got {type(cfg).__name__}")
        return self._set_all({f.name: getattr(cfg, f.name) for f in fields(cfg)})

    def _set_all(self, options: dict[str, Any]) -> TrainerBuilder:
        for name, value in options.items():
            self._set(name, value)
        return self

    def build_config(self) -> TrainerConfig:
        """The options set so far, as a :class:`TrainerConfig`."""
        return replace(self._cfg)

    def run(self) -> DdpHandle:
        """Validate everything, start the ranks, return the :class:`DdpHandle` (non-blocking);
        a bad option, a dataset smaller than the world or a factory the ranks could not receive
        raises :class:`~flodl_core.ConfigError` before any process starts."""
        return start(self._cfg, self._factories)


def _enum(kind: Any, name: str, value: Any) -> Any:
    try:
        return kind(str(value).strip().lower())
    except ValueError:
        valid = ", ".join(m.value for m in kind)
        raise ConfigError(f"unknown {name} {value!r}; expected one of {valid}") from None


class Trainer:
    """The trainer's two entry points; the third tier, bypass, is plain functions (module doc)."""

    @staticmethod
    def builder(
        model_factory: Callable[..., nn.Module],
        optim_factory: Callable[..., Any],
        train_step: Callable[..., Any],
    ) -> TrainerBuilder:
        """A managed run: the framework owns the loop.

        Args:
            model_factory: ``model_factory()`` or ``model_factory(device)`` -> ``nn.Module``;
                called on every rank with the same seed (and checked to build the same
                architecture everywhere). Must be importable (top-level) to reach spawned ranks.
            optim_factory: ``optim_factory(params) -> torch.optim.Optimizer``.
            train_step: ``train_step(model, batch) -> loss`` (a scalar tensor); the framework
                does backward, clipping, the optimizer step and the averaging. ``batch`` is a
                :class:`flodl_core.Batch` (``batch[0]``, ``batch["name"]``). In sync mode ``model``
                is the ``DistributedDataParallel`` wrapper: call it, not the factory's model.
        """
        return TrainerBuilder(model_factory, optim_factory, train_step)

    @staticmethod
    def setup(model: nn.Module, optim_factory: Callable[..., Any], config: DdpConfig) -> Any:
        """A cooperative run: you own the loop inside each rank (see :class:`DdpSession`)."""
        return DdpSession(model, optim_factory, config)
