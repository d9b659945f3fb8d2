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

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, DataLoader
from flodl_core.optim import Scheduler

from ._average import Averager
from ._comm import Comm
from ._config import TrainerConfig, check_slowdown
from ._elche import ElChe
from ._errors import DdpError
from ._gate import TAIL_FRACTION, WindowGate
from ._handle import TrainedState, state_of
from ._ledger import EpochLedger, now
from ._metrics import EpochMetrics, ScalarSink, combine_ranks, run_eval
from ._modes import Mode, Policy
from ._partition import partition
from ._policy import Overshoot, wrap_sync
from ._replicas import broadcast_initial, check_replicas
from ._rounds import AveragingRound
from ._slowdown import Slowdown
from ._verdicts import make_guard, make_meta
from ._warmup import warm_up
from ._worklist import EpochWork, RankWork


@dataclass
class RankContext:
    """Where a rank runs: its rank, the world, its device and host, its exchange channel."""

    rank: int
    world_size: int
    device: torch.device
    host: str
    comm: Comm
    t0: float  # the run's start (time.time()), shared by every rank: timeline times


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
            broadcast_initial(model, self.device, mode.backend)
        # Identical init on every rank above; from here each rank draws its own randomness.
        torch.manual_seed(cfg.seed * 1009 + 7919 * (self.rank + 1))

        self.optimizer = self._make_optimizer(optim_factory)
        self._setup_data()
        self.scheduler = self._make_scheduler()
        self._sched_step = 0
        self._make_controllers()
        self.slowdown = Slowdown(check_slowdown(cfg.slowdown).get(self.rank, 1.0), self.device)
        self.timeline: Any = None
        if cfg.timeline:
            from ._timeline import Timeline

            self.timeline = Timeline(origin=ctx.t0)
        self.sink = ScalarSink()
        self.ledger = EpochLedger(self.rank, self.timeline, ctx.t0)

        self.start_epoch = 0
        self.global_step = 0
        self.window = 0
        self._epoch_calls = 0
        self.metrics: list[EpochMetrics] = []
        if cfg.resume:
            from ._resume import load_checkpoint_into

            load_checkpoint_into(self, cfg.resume)

        self.forward_model, self._hook = self._wrap_for_sync()
        self._ddp_forward = False
        self._stepped = True
        self._compute_s = 0.0
        warm_up(self.device, self.model)
        if self.world > 1:
            # Building the optimizer can take a second (torch imports lazily on first use), and
            # ranks get there at different times: without this, the first rank in would clock
            # that skew as idle in epoch 0 and ElChe's first timings would carry it.
            self.comm.barrier("start")

    def _wrap_for_sync(self) -> tuple[nn.Module, Any]:
        """Sync with several ranks: the model inside DDP (and a check that the forward went
        through it); otherwise the model itself."""
        if not (self.sync and self.world > 1):
            return self.model, None
        # Every rank steps on one full batch: the plain mean is the batch-weighted average.
        ddp, hook = wrap_sync(self.model, self.device, self.mode.backend, self.cfg.bf16_wire)
        ddp.register_forward_pre_hook(self._saw_forward)
        return ddp, hook

    def _make_optimizer(self, optim_factory: Callable[..., Any]) -> torch.optim.Optimizer:
        """The user's optimizer on this replica, its LR scaled by ``lr_scale_ratio``."""
        opt = optim_factory(list(self.model.parameters()))
        if not isinstance(opt, torch.optim.Optimizer):
            raise ConfigError(
                f"optim_factory returned a {type(opt).__name__}; expected a "
                "torch.optim.Optimizer built on the parameters it was given"
            )
        self.lr_scale = 1.0 + float(self.cfg.lr_scale_ratio) * (self.world - 1)
        if self.lr_scale != 1.0:
            for g in opt.param_groups:
                g["lr"] = g["lr"] * self.lr_scale
        return opt

    def _make_scheduler(self) -> Any:
        if self.cfg.scheduler is None:
            return None
        sched = self.cfg.scheduler(self.optimizer, self.total_steps)
        if not isinstance(sched, Scheduler) and not callable(getattr(sched, "step", None)):
            raise ConfigError(
                f"scheduler factory returned a {type(sched).__name__}; expected a "
                "flodl_core Scheduler or an object with .step()"
            )
        return sched

    def _make_controllers(self) -> None:
        """ElChe, the guard, the meta-controller, the averager and the round that drives them:
        identical copies on every rank, fed identical numbers."""
        cfg = self.cfg
        self.elche = ElChe(
            self.world,
            cfg.anchor,
            overhead_target=cfg.overhead_target,
            max_anchor=cfg.max_anchor,
            min_anchor=cfg.min_anchor,
            max_batch_diff=cfg.max_batch_diff,
            speed_hint=tuple(cfg.speed_hint) if cfg.speed_hint is not None else None,  # type: ignore[arg-type]
            partition_ratios=cfg.partition_ratios,
            relax_up=cfg.elche_relax_up,
        )
        self.guard = make_guard(cfg)
        self.meta = make_meta(cfg)
        self.averager = Averager(
            self.model,
            self.mode.backend,
            self.world,
            bf16_wire=cfg.bf16_wire,
            easgd_alpha=cfg.easgd_alpha,
            outer=cfg.outer_optimizer,
        )
        if self.world > 1 and not self.sync and cfg.shared_memory:
            # collectives: every rank gets here
            self.averager.share_memory(self.comm)
            self.comm.share_counters()
        self.overshoot = Overshoot(cfg.max_overshoot, self.batches_per_epoch)
        self.rounds = AveragingRound(
            self.rank,
            self.world,
            self.comm,
            self.device,
            self.averager,
            self.elche,
            self.guard,
            self.meta,
            self.overshoot,
        )

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

    def _sync_iterator(self, epoch: int) -> tuple[Iterator[Any], int]:
        """Sync: equal consecutive slices, every rank the same number of steps (lockstep)."""
        bs = int(self.cfg.batch_size)  # type: ignore[arg-type]
        plan = partition(self.n_samples, self.world, epoch=epoch, seed=self.cfg.seed)
        steps = min(len(s) // bs for s in plan)
        steps = min(steps, self.batches_per_epoch // self.world or 1)
        mine = plan[self.rank]
        return iter(self.loader.shard_range(mine.start, mine.stop).epoch(epoch)), steps

    def _rank_work(self, epoch: int) -> RankWork:
        """Cadence / async: own slices by throughput share plus the shared pool (see
        :mod:`._worklist`); the pool's counter is a store key unique to this epoch call."""
        bs = int(self.cfg.batch_size)  # type: ignore[arg-type]
        shares: list[float] | None = None
        if self.cfg.partition_ratios is not None:
            shares = [float(r) for r in self.cfg.partition_ratios]
        elif self.elche.calibrated:
            shares = self.elche.throughput_shares()
        plan = EpochWork.plan(self.batches_per_epoch, shares, self.world)
        self._epoch_calls += 1
        key = f"pool{self._epoch_calls}"
        if self.rank == 0 and self._epoch_calls > 2:
            self.comm.drop_counter(f"pool{self._epoch_calls - 2}")
        loader = self.loader

        def open_block(block: range) -> Iterator[Any]:
            return iter(loader.shard_range(block.start * bs, block.stop * bs).epoch(epoch))

        return RankWork(
            plan,
            self.rank,
            claim=lambda: self._claim(key),
            peek=lambda: self.comm.counter(key, 0),
            open_block=open_block,
        )

    def _claim(self, key: str) -> int:
        self._settle_slowdown()  # claims in the order the ranks' clocks say
        return self.comm.counter(key, 1) - 1

    def _settle_slowdown(self) -> None:
        """Pay the slowdown's debt before this rank does something the others can see (see
        :mod:`._slowdown`); the pause counts as this rank's compute."""
        if self.slowdown.owed > 0:
            t = now()
            self.slowdown.settle()
            self._compute_s += now() - t

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
        self.ledger.add_loss(loss)
        self._stepped = True

    def _saw_forward(self, module: nn.Module, args: Any) -> None:
        self._ddp_forward = True

    def _run_batch(self, batch: Any) -> Iterator[Any]:
        t = now()
        self._stepped = False
        yield batch
        if not self._stepped:
            self._stepped = True  # no batch is open any more: a late step() is refused too
            raise DdpError(
                "a batch was taken from the epoch without step(loss): call step(loss) once per "
                "batch (the ranks count batches to know when to average)"
            )
        self.slowdown.after_batch(t)
        self._compute_s += now() - t

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
        t_epoch = now()
        self.ledger.reset()
        self.ledger.mark(epoch_start=epoch)
        if self.sync:
            it, steps = self._sync_iterator(epoch)
            yield from self._sync_epoch(it, steps)
        else:
            work = self._rank_work(epoch)
            try:
                yield from self._window_epoch(work)
            finally:
                work.close()
        self._end_epoch(epoch, now() - t_epoch)

    def _sync_epoch(self, it: Iterator[Any], steps: int) -> Iterator[Any]:
        start = now()
        self._compute_s = 0.0
        for _ in range(steps):
            yield from self._run_batch(next(it))
            self.global_step += self.world
            self._advance_schedule()
        self._settle_slowdown()
        led = self.ledger
        led.flush_loss(steps)
        led.compute += self._compute_s
        led.batches += steps
        led.syncs += steps
        if self._hook is not None:
            led.comm_bytes += steps * self._hook.step_bytes
        led.span("compute", start, now())

    def _waiting(self, async_: bool, mine: int) -> tuple[bool, int]:
        """Whether a rank that ran its ``mine`` batches keeps training until every rank is ready,
        and for how many extra batches at most.

        Async ranks do (up to the overshoot). Cadence does in its probe windows, before ElChe has
        measured anything: the cold counts are equal, and a fast rank would otherwise idle
        through the slow one's probe (up to one more cold count). So does async's automatic
        overshoot there (2-5 batches): a fast rank idled 330 ms of a 3.3 s epoch 0 with it.
        """
        cold = not self.elche.calibrated
        if not async_:
            return cold, mine
        limit = self.overshoot.current
        if cold and self.overshoot.fixed is None:
            limit = max(limit, mine)
        return True, limit

    def _window_epoch(self, work: RankWork) -> Iterator[Any]:
        """Windows of ElChe's counts until no rank has data left; an averaging round after each."""
        async_ = self.mode.policy is Policy.ASYNC
        finished = False
        while not finished:
            self.window += 1
            mine = self.elche.counts[self.rank]
            waits, limit = self._waiting(async_, mine)
            tail = int(sum(self.elche.counts) * TAIL_FRACTION)
            gate = WindowGate(
                self.comm, self.world, self.window, mine, waits=waits, limit=limit,
                max_batch_diff=self.cfg.max_batch_diff,
                fill_late=async_ and self.elche.outpaces_slow_cohort(self.rank),
                settle=self._settle_slowdown, finish=lambda tail=tail: work.left() <= tail,
            )  # fmt: skip
            w_start = now()
            self._compute_s = 0.0
            done = 0
            while gate.keep_going(done):
                batch = work.next()
                if batch is None:  # this rank's share of the epoch is done
                    break
                yield from self._run_batch(batch)
                done += 1
            self._settle_slowdown()
            more = work.has_more()
            gate.stop()
            result = self.rounds.close(
                self.window, done, more, self._compute_s, gate.throttled, self._lr(), self.ledger,
                w_start, in_hand=work.in_hand(), drained=work.drained,
            )  # fmt: skip
            finished = result.finished
            self.global_step += sum(result.actual)
            self._advance_schedule()
            self.ledger.flush_loss(done)

    def _lr(self) -> float:
        groups = self.optimizer.param_groups
        return float(groups[0]["lr"]) if groups else math.nan

    # ---- epoch end ----------------------------------------------------------------------------

    def _end_epoch(self, epoch: int, wall_s: float) -> None:
        bs = int(self.cfg.batch_size)  # type: ignore[arg-type]
        sums, counts = self.sink.take()
        led = self.ledger
        mine = led.payload(self.ctx.host, self.device, wall_s, sums, counts)
        # Rank 0 evaluates before the exchange, where the others wait for it anyway: after it,
        # they would start the next epoch and clock rank 0's evaluation as that epoch's idle,
        # and a world of one (which evaluates outside its epoch time) would not be comparable.
        eval_value = None
        if self.rank == 0 and self.cfg.eval_fn is not None:
            eval_value = run_eval(self.model, self.cfg.eval_fn)
        ranks = [json.loads(b) for b in self.comm.exchange_bytes("ep", json.dumps(mine).encode())]
        m = combine_ranks(
            epoch,
            ranks,
            batch_size=bs,
            syncs=led.syncs,
            sync_ms=led.sync_max_ms,
            eval_value=eval_value,
            anchor=None if self.sync else self.elche.anchor,
            lr=self._lr(),
            counts=None if self.sync else list(self.elche.counts),
        )
        self.metrics.append(m)
        led.mark(epoch_end=epoch, loss=m.avg_loss)
        every = self.cfg.checkpoint_every
        if every and (epoch + 1) % every == 0:
            from ._resume import save_checkpoint_from

            save_checkpoint_from(self, epoch)

    # ---- timeline and result ---------------------------------------------------------------

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
