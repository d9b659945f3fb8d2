"""One rank's training engine, shared by the managed and the cooperative tiers.

:class:`RankEngine` owns the replica, its optimizer, the data slice, ElChe, the guard and the
averager. The training loop is inverted into a generator: ``for batch in engine.epoch(k)``
yields this rank's batches; the caller computes the loss and calls ``engine.step(loss)``;
between two batches the generator decides, by policy, when to stop and average. Every decision
that must agree across ranks (counts, weights, when the epoch ends, the next data split) is
computed from numbers all ranks received in the same exchange, so the ranks never disagree on
which collective comes next.
"""

from __future__ import annotations

import io
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, DataLoader
from flodl_core.optim import Scheduler

from ._average import Averager
from ._buckets import broadcast_buckets
from ._comm import Comm
from ._config import TrainerConfig, check_slowdown
from ._elche import ElChe
from ._errors import DdpError
from ._handle import TrainedState, state_of
from ._metrics import EpochMetrics, ScalarSink, combine_ranks
from ._modes import Backend, Mode, Policy
from ._partition import partition
from ._policy import Overshoot, cap_batches, wrap_sync
from ._slowdown import Slowdown
from ._verdicts import GuardStep, make_guard, make_meta


@dataclass
class RankContext:
    """Where a rank runs: its rank, the world, its device and host, its exchange channel."""

    rank: int
    world_size: int
    device: torch.device
    host: str
    comm: Comm
    t0: float  # the run's start (time.time()), shared by every rank: timeline times


def _now() -> float:
    return time.perf_counter()


def _finite(**fields: Any) -> dict[str, Any]:
    """Timeline event fields without NaN / inf (JSON cannot hold them)."""
    return {k: v for k, v in fields.items() if not isinstance(v, float) or math.isfinite(v)}


def replica_signature(model: nn.Module) -> list[list[Any]]:
    """``[name, shape, dtype]`` of every parameter, then every buffer."""
    out: list[list[Any]] = []
    for kind, items in (("param", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, t in items:
            out.append([kind, name, list(t.shape), str(t.dtype).removeprefix("torch.")])
    return out


def check_replicas(model: nn.Module, comm: Comm) -> None:
    """Raise :class:`ConfigError` on every rank when the replicas differ between ranks."""
    mine = json.dumps(replica_signature(model)).encode()
    sigs = [json.loads(b) for b in comm.exchange_bytes("sig", mine)]
    ref = sigs[0]
    for r, sig in enumerate(sigs[1:], start=1):
        if sig == ref:
            continue
        n0 = sum(1 for e in ref if e[0] == "param")
        nr = sum(1 for e in sig if e[0] == "param")
        detail = f"rank 0 has {n0} parameters, rank {r} has {nr}"
        for a, b in zip(ref, sig, strict=False):
            if a != b:
                detail += f"; first difference: rank 0 {a[0]} {a[1]} {a[2]} {a[3]} vs "
                detail += f"rank {r} {b[0]} {b[1]} {b[2]} {b[3]}"
                break
        raise ConfigError(
            f"model replicas differ between ranks ({detail}); model_factory must build the same "
            "architecture on every rank"
        )


class RankEngine:
    """One rank of a run (see the module docstring).

    Args:
        cfg: the run's options (validated).
        mode: the parsed mode.
        ctx: where this rank runs.
        model: this rank's replica, already on ``ctx.device``.
        optim_factory: ``optim_factory(params) -> torch.optim.Optimizer``.
    """

    def __init__(
        self,
        cfg: TrainerConfig,
        mode: Mode,
        ctx: RankContext,
        model: nn.Module,
        optim_factory: Callable[..., Any],
    ) -> None:
        self.cfg = cfg
        self.mode = mode
        self.ctx = ctx
        self.rank = ctx.rank
        self.world = ctx.world_size
        self.comm = ctx.comm
        self.device = ctx.device
        self.model = model
        self.sync = mode.policy is Policy.SYNC
        if self.world > 1:
            check_replicas(model, self.comm)
            self._broadcast_initial(mode.backend)
        # Identical init on every rank above; from here each rank draws its own randomness.
        torch.manual_seed(cfg.seed * 1009 + 7919 * (self.rank + 1))

        self.optimizer = optim_factory(list(model.parameters()))
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            raise ConfigError(
                f"optim_factory returned a {type(self.optimizer).__name__}; expected a "
                "torch.optim.Optimizer built on the parameters it was given"
            )
        self.lr_scale = 1.0 + float(cfg.lr_scale_ratio) * (self.world - 1)
        if self.lr_scale != 1.0:
            for g in self.optimizer.param_groups:
                g["lr"] = g["lr"] * self.lr_scale

        self._setup_data()
        self.scheduler: Any = None
        self._sched_step = 0
        if cfg.scheduler is not None:
            self.scheduler = cfg.scheduler(self.optimizer, self.total_steps)
            if not isinstance(self.scheduler, Scheduler) and not callable(
                getattr(self.scheduler, "step", None)
            ):
                raise ConfigError(
                    f"scheduler factory returned a {type(self.scheduler).__name__}; expected a "
                    "flodl_core Scheduler or an object with .step()"
                )

        self.elche = ElChe(
            self.world,
            cfg.anchor,
            overhead_target=cfg.overhead_target,
            max_anchor=cfg.max_anchor,
            min_anchor=cfg.min_anchor,
            max_batch_diff=cfg.max_batch_diff,
            speed_hint=tuple(cfg.speed_hint) if cfg.speed_hint is not None else None,  # type: ignore[arg-type]
            partition_ratios=cfg.partition_ratios,
        )
        self.guard = make_guard(cfg)
        self.meta = make_meta(cfg)
        self.averager = Averager(
            model,
            mode.backend,
            self.world,
            bf16_wire=cfg.bf16_wire,
            easgd_alpha=cfg.easgd_alpha,
            outer=cfg.outer_optimizer,
        )
        self.overshoot = Overshoot(cfg.max_overshoot, self.batches_per_epoch)
        self.slowdown = Slowdown(check_slowdown(cfg.slowdown).get(self.rank, 1.0), self.device)
        self.timeline: Any = None
        if cfg.timeline:
            from ._timeline import Timeline

            self.timeline = Timeline(origin=ctx.t0)
        self.sink = ScalarSink()

        self.start_epoch = 0
        self.global_step = 0
        self.window = 0
        self.metrics: list[EpochMetrics] = []
        if cfg.resume:
            from ._resume import load_checkpoint_into

            load_checkpoint_into(self, cfg.resume)

        self.forward_model: nn.Module = model
        self._hook: Any = None
        if self.sync and self.world > 1:
            self.forward_model, self._hook = wrap_sync(
                model, self.device, mode.backend, cfg.bf16_wire, 1.0 / self.world
            )
            self.forward_model.register_forward_pre_hook(self._saw_forward)
        self._ddp_forward = False
        self._stepped = True
        self._loss_sum: Tensor | None = None

    @torch.no_grad()
    def _broadcast_initial(self, backend: Backend) -> None:
        """Rank 0's initial weights everywhere (factories may draw differently per rank). The cpu
        backend goes through CPU copies, so ranks on different device kinds can pair up."""
        tensors = [p.data for p in self.model.parameters()] + list(self.model.buffers())
        if not tensors:
            return
        if backend is Backend.CPU and self.device.type != "cpu":
            copies = [t.to("cpu") for t in tensors]
            broadcast_buckets(copies)
            for t, c in zip(tensors, copies, strict=True):
                t.copy_(c)
        else:
            broadcast_buckets(tensors)

    # ---- data ---------------------------------------------------------------------------------

    def _setup_data(self) -> None:
        cfg = self.cfg
        self.loader = DataLoader(
            cfg.dataset,
            batch_size=cfg.batch_size,  # type: ignore[arg-type]
            device=self.device,
            seed=cfg.seed,
            shuffle=True,
            drop_last=True,
        )
        self.n_samples = self.loader.num_samples
        bs = int(cfg.batch_size)  # type: ignore[arg-type]
        if self.n_samples < self.world:
            raise ConfigError(
                f"the dataset has {self.n_samples} samples, fewer than the {self.world} ranks; "
                "every rank needs data: use a larger dataset or fewer devices"
            )
        if self.n_samples // self.world < bs:
            raise ConfigError(
                f"{self.n_samples} samples split over {self.world} ranks give "
                f"{self.n_samples // self.world} per rank, less than batch_size {bs}: no rank "
                "would get a batch; lower batch_size or use fewer devices"
            )
        whole = self.n_samples // bs
        self.batches_per_epoch = min(whole, cfg.batches_per_epoch or whole)
        self.total_steps = self.batches_per_epoch * int(cfg.num_epochs or 1)

    def _plan(self, epoch: int) -> list[range]:
        if self.sync or self.world == 1:
            shares: list[float] | int = self.world
        elif self.cfg.partition_ratios is not None:
            shares = [float(r) for r in self.cfg.partition_ratios]
        else:
            shares = self.elche.throughput_shares()
        return list(partition(self.n_samples, shares, epoch=epoch, seed=self.cfg.seed))

    def _batches(self, plan: list[range]) -> list[int]:
        bs = int(self.cfg.batch_size)  # type: ignore[arg-type]
        nb = [len(s) // bs for s in plan]
        if self.sync:  # lockstep: every rank runs the same number of steps
            nb = [min(nb)] * self.world
        nb = cap_batches(nb, self.cfg.batches_per_epoch)
        if self.sync:
            nb = [min(nb)] * self.world
        return nb

    def _iterator(self, plan: list[range], nb: list[int], epoch: int) -> Iterator[Any]:
        mine = plan[self.rank]
        if nb[self.rank] == 0:
            return iter(())
        return iter(self.loader.shard_range(mine.start, mine.stop).epoch(epoch))

    # ---- the step -----------------------------------------------------------------------------

    def step(self, loss: Tensor) -> None:
        """Backward, per-rank clipping, optimizer step, zero_grad; the loss is recorded."""
        if not isinstance(loss, Tensor) or loss.numel() != 1:
            raise ConfigError(
                f"train_step must return a scalar loss tensor, got {type(loss).__name__}"
                + (f" of shape {tuple(loss.shape)}" if isinstance(loss, Tensor) else "")
            )
        if self._stepped:
            raise DdpError("step(loss) called twice for one batch, or outside session.epoch()")
        if self._hook is not None and not self._ddp_forward:
            raise DdpError(
                "sync mode averages gradients inside backward, which needs the forward to run "
                "through the DistributedDataParallel wrapper: call the model you are given "
                "(train_step's model argument, or session.model), not the original module"
            )
        self._ddp_forward = False
        loss.backward()
        if self.cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        d = loss.detach().float()
        self._loss_sum = d if self._loss_sum is None else self._loss_sum + d
        self._stepped = True

    def _saw_forward(self, module: nn.Module, args: Any) -> None:
        self._ddp_forward = True

    def _run_batch(self, batch: Any) -> Iterator[Any]:
        t = _now()
        self._stepped = False
        yield batch
        if not self._stepped:
            self._stepped = True  # no batch is open any more: a late step() is refused too
            raise DdpError(
                "a batch was taken from the epoch without step(loss): call step(loss) once per "
                "batch (the ranks count batches to know when to average)"
            )
        self.slowdown.after_batch(t)
        self._compute_s += _now() - t

    def _advance_schedule(self) -> None:
        s = self.scheduler
        if s is None:
            return
        if isinstance(s, Scheduler):
            s.apply(self.optimizer, self.global_step)
            return
        while self._sched_step < self.global_step:
            s.step()
            self._sched_step += 1

    # ---- epochs -------------------------------------------------------------------------------

    def epoch(self, epoch: int) -> Iterator[Any]:
        """This rank's batches of ``epoch``; averages between batches as the policy says."""
        self.sink.install()
        t_epoch = _now()
        self._ep = {"compute": 0.0, "sync": 0.0, "idle": 0.0, "batches": 0, "syncs": 0}
        self._ep_sync_max: list[float] = []
        self._loss_total = 0.0
        self._loss_n = 0
        self._mark(epoch_start=epoch)
        plan = self._plan(epoch)
        nb = self._batches(plan)
        it = self._iterator(plan, nb, epoch)
        if self.sync:
            yield from self._sync_epoch(it, nb[self.rank])
        else:
            yield from self._window_epoch(it, nb)
        self._end_epoch(epoch, _now() - t_epoch)

    def _sync_epoch(self, it: Iterator[Any], steps: int) -> Iterator[Any]:
        start = _now()
        self._compute_s = 0.0
        for _ in range(steps):
            yield from self._run_batch(next(it))
            self.global_step += self.world
            self._advance_schedule()
        self._flush_loss(steps)
        self._ep["compute"] += self._compute_s
        self._ep["batches"] += steps
        self._ep["syncs"] += steps
        self._span("compute", start, _now())

    def _window_epoch(self, it: Iterator[Any], nb: list[int]) -> Iterator[Any]:
        remaining = list(nb)
        async_ = self.mode.policy is Policy.ASYNC
        while any(r > 0 for r in remaining):
            self.window += 1
            counts = self.elche.counts
            target = [min(c, r) for c, r in zip(counts, remaining, strict=True)]
            mine, left = target[self.rank], remaining[self.rank]
            ready_key = f"rdy{self.window}"
            w_start = _now()
            self._compute_s = 0.0
            done = 0
            marked = False
            throttled = False
            while done < left:
                if done >= mine:
                    if not async_:
                        break
                    n_ready = self.comm.counter(ready_key, 0 if marked else 1)
                    marked = True
                    if n_ready >= self.world or done - mine >= self.overshoot.current:
                        break
                    if (
                        self.cfg.max_batch_diff is not None
                        and done - mine >= self.cfg.max_batch_diff
                    ):
                        throttled = True
                        break
                yield from self._run_batch(next(it))
                done += 1
            if async_ and not marked:
                self.comm.counter(ready_key, 1)
            compute_end = _now()
            # Arrival: who ran how many batches. Waiting here is idle time, not sync time.
            actual = [int(v[0]) for v in self.comm.exchange("n", [float(done)])]
            idle_end = _now()
            total = sum(actual)
            weight = actual[self.rank] / total if total > 0 else 1.0 / self.world
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            div = self.averager.average(weight)
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            sync_end = _now()
            compute_ms = self._compute_s * 1000.0
            sync_ms = (sync_end - idle_end) * 1000.0
            stats = self.comm.exchange("s", [compute_ms, div, sync_ms])
            if self.rank == 0 and self.window > 2:
                self.comm.delete(f"rdy{self.window - 2}")
            remaining = [r - a for r, a in zip(remaining, actual, strict=True)]
            self.global_step += total
            self._advance_schedule()
            self._flush_loss(done)
            self._after_round(actual, stats, throttled)
            self._ep["compute"] += self._compute_s
            self._ep["idle"] += idle_end - compute_end
            self._ep["sync"] += sync_end - idle_end
            self._ep["batches"] += done
            self._ep["syncs"] += 1
            self._ep_sync_max.append(max(s[2] for s in stats))
            self._span("compute", w_start, compute_end)
            self._span("idle", compute_end, idle_end)
            self._span("sync", idle_end, sync_end)

    def _after_round(self, actual: list[int], stats: list[list[float]], throttled: bool) -> None:
        """Feed the round's numbers (identical on every rank) to guard, ElChe, meta, overshoot."""
        walls = [s[0] for s in stats]
        divs = [s[1] for s in stats]
        sync_ms = max(s[2] for s in stats)
        before = self.elche.anchor
        verdict: GuardStep = self.guard.report(divs, max(actual))
        if verdict.nudge is not None:
            self.elche.nudge_anchor_down(verdict.nudge)
        self.elche.report_timing(walls, actual, sync_ms, allow_growth=verdict.allow_growth)
        if self.meta is not None:
            factor = self.meta.observe(
                self._lr(), self.elche.anchor, verdict.action, self.elche.phase
            )
            if factor is not None:
                self.elche.nudge_anchor_down(factor)
        self.overshoot.after_round(verdict.stable, self.elche.anchor)
        if self.timeline is not None and self.rank == 0:
            t = time.time() - self.ctx.t0
            self.timeline.event(
                "sync", t, **_finite(window=self.window, sync_ms=sync_ms, d_max=max(divs))
            )
            if self.elche.anchor != before:
                self.timeline.event("anchor_changed", t, old=before, new=self.elche.anchor)
            if not verdict.stable:
                self.timeline.event(
                    "guard", t, verdict=verdict.name, **_finite(**self.guard.telemetry())
                )
        if throttled and self.timeline is not None:
            self.timeline.event("throttle", time.time() - self.ctx.t0, rank=self.rank)

    def _flush_loss(self, batches: int) -> None:
        if self._loss_sum is not None:
            self._loss_total += float(self._loss_sum)
            self._loss_n += batches
            self._loss_sum = None

    def _lr(self) -> float:
        groups = self.optimizer.param_groups
        return float(groups[0]["lr"]) if groups else math.nan

    # ---- epoch end ----------------------------------------------------------------------------

    def _end_epoch(self, epoch: int, wall_s: float) -> None:
        bs = int(self.cfg.batch_size)  # type: ignore[arg-type]
        sums, counts = self.sink.take()
        ep = self._ep
        mine = {
            "host": self.ctx.host,
            "device": str(self.device),
            "loss_sum": self._loss_total,
            "loss_n": self._loss_n,
            "batches": ep["batches"],
            "compute": ep["compute"],
            "sync": ep["sync"],
            "idle": ep["idle"],
            "wall": wall_s,
            "sums": sums,
            "counts": counts,
        }
        ranks = [json.loads(b) for b in self.comm.exchange_bytes("ep", json.dumps(mine).encode())]
        eval_value = None
        if self.rank == 0 and self.cfg.eval_fn is not None:
            eval_value = self._evaluate()
        m = combine_ranks(
            epoch,
            ranks,
            batch_size=bs,
            syncs=int(ep["syncs"]),
            sync_ms=self._ep_sync_max,
            eval_value=eval_value,
            anchor=None if self.sync else self.elche.anchor,
            lr=self._lr(),
            counts=None if self.sync else list(self.elche.counts),
        )
        self.metrics.append(m)
        self._mark(epoch_end=epoch, loss=m.avg_loss)
        every = self.cfg.checkpoint_every
        if every and (epoch + 1) % every == 0:
            from ._resume import save_checkpoint_from

            save_checkpoint_from(self, epoch)

    def _evaluate(self) -> float | dict[str, float]:
        fn = self.cfg.eval_fn
        assert fn is not None
        was = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                out = fn(self.model)
        finally:
            self.model.train(was)
        if isinstance(out, dict):
            return {str(k): float(v) for k, v in out.items()}
        return float(out)

    # ---- timeline -----------------------------------------------------------------------------

    def _span(self, kind: str, start: float, end: float) -> None:
        if self.timeline is None or end <= start:
            return
        # perf_counter -> seconds since the run's start on the shared wall clock
        offset = time.time() - _now() - self.ctx.t0
        self.timeline.span(self.rank, kind, max(0.0, start + offset), max(0.0, end + offset))

    def _mark(self, **fields: Any) -> None:
        if self.timeline is None or self.rank != 0:
            return
        (kind, value), *rest = fields.items()
        self.timeline.event(kind, time.time() - self.ctx.t0, epoch=value, **dict(rest))

    def gather_timeline(self) -> Any:
        """Rank 0: every rank's timeline merged; other ranks: ``None``. A collective."""
        if self.timeline is None:
            return None
        blob = json.dumps(self.timeline.to_dict()).encode()
        parts = self.comm.exchange_bytes("tl", blob)
        if self.rank != 0:
            return None
        from ._timeline import Timeline

        merged = Timeline.from_dict(json.loads(parts[0]))
        for b in parts[1:]:
            merged.merge(Timeline.from_dict(json.loads(b)))
        return merged

    # ---- the result ---------------------------------------------------------------------------

    def final_state(self) -> TrainedState:
        """The trained model as CPU tensors (the last consensus with EASGD)."""
        state = state_of(self.model)
        consensus = self.averager.final_params()
        if consensus is not None:
            names = [n for n, _ in self.model.named_parameters()]
            state.params = {
                n: t.detach().to("cpu", copy=True) for n, t in zip(names, consensus, strict=True)
            }
        return state

    def rank_state_bytes(self) -> bytes:
        """This rank's private state (optimizer, RNG, scheduler), serialised for rank 0."""
        state: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "sched_step": self._sched_step,
        }
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        if self.scheduler is not None and callable(getattr(self.scheduler, "state_dict", None)):
            state["scheduler"] = self.scheduler.state_dict()
        if self.averager.alpha is not None:  # EASGD: replicas differ, keep each one
            state["params"] = [p.detach().to("cpu", copy=True) for p in self.model.parameters()]
        buf = io.BytesIO()
        torch.save(state, buf)
        return buf.getvalue()
