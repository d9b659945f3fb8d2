"""One rank's training engine, for every way a run is launched and both tiers.

:class:`RankEngine` owns the replica, its optimizer, the data, ElChe, the guard and the averager.
What differs between a static world, torchrun and an elastic torchft quorum is plugged in
through the :class:`RankContext`: its ``comm`` (:mod:`flodl_ddp._comm`), its ``membership``
(:mod:`flodl_ddp._membership`) and its ``reducer`` factory (:mod:`flodl_ddp._reduce`).

The training loop is inverted into a generator: ``for batch in engine.epoch(k)`` yields this
rank's batches; the caller computes the loss and calls ``engine.step(loss)``; between two batches
the generator decides, by policy, when to stop and average. Every decision that must agree
across ranks (counts, weights, when the epoch ends, the next data split) is computed from
numbers all ranks received in the same exchange, so the ranks never disagree on which
collective comes next.

Elastic windows (``membership.elastic``): each window starts with the quorum (a rank that is
behind heals from a living peer: :meth:`load_state_dict`), its batches are the next ones after
the epoch's committed cursor, cut by ElChe's counts over the members
(:class:`~flodl_ddp._worklist.WindowWork`), and a window whose round does not commit is rolled
back (weights, optimizer, controllers, tally) and planned again over the survivors.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, DataLoader
from flodl_core.optim import Scheduler

from ._average import Averager
from ._comm import Comm
from ._elche import ElChe
from ._errors import DdpError
from ._ft import WindowVoid
from ._gate import TAIL_FRACTION, Overshoot, WindowGate, waiting
from ._handle import TrainedState, state_of
from ._ledger import EpochTally, RankLedger, now, peak_memory
from ._membership import Membership, StaticWorld
from ._meta import MetaController
from ._metrics import EpochMetrics, Progress, ScalarSink, combine_ranks, run_eval
from ._modes import Backend, Policy
from ._options import RunSpec
from ._partition import partition
from ._reduce import Reducer
from ._resume import load_checkpoint_into, save_checkpoint_from
from ._rounds import AveragingRound, WindowReport
from ._slowdown import Slowdown
from ._sync_hook import wrap_sync
from ._timeline import Timeline
from ._utilization import UtilizationSampler
from ._warmup import warm_up
from ._watchdog import WAITING, Beacon
from ._worklist import EpochWork, RankWork, WindowWork, claim_size


@dataclass
class RankContext:
    """Where a rank runs and what it talks through.

    ``reducer(averager)`` picks the averaging rounds' reduction (a collective: every rank calls
    it at the same point); ``hosts`` names each rank's host (``None``: exchanged at start).
    """

    rank: int
    world_size: int
    device: torch.device
    host: str
    comm: Comm
    t0: float  # the run's start (time.time()), shared by every rank: timeline times
    reducer: Callable[[Averager], Reducer]
    membership: Membership = field(default_factory=lambda: StaticWorld(1))
    hosts: list[str] | None = None
    devices: list[str] | None = None
    beacon: Beacon = field(default_factory=lambda: Beacon(0))


class RankEngine:
    """One rank of a run (see the module docstring).

    Args:
        spec: the checked run.
        ctx: where this rank runs.
        model: this rank's replica, already on ``ctx.device``.
        optim_factory: ``optim_factory(params) -> torch.optim.Optimizer``.
    """

    def __init__(
        self, spec: RunSpec, ctx: RankContext, model: nn.Module, optim_factory: Callable[..., Any]
    ) -> None:
        self.spec = spec
        self.ctx = ctx
        self.rank, self.world, self.device = ctx.rank, ctx.world_size, ctx.device
        self.comm = ctx.comm
        self.membership = ctx.membership
        self.elastic = ctx.membership.elastic
        self.model = model
        self.membership.agree(model, self.comm, self.device, spec.mode.backend)
        # Identical init on every rank above; from here each rank draws its own randomness.
        torch.manual_seed(spec.seed * 1009 + 7919 * (self.rank + 1))
        self.optimizer = self._make_optimizer(optim_factory)
        self._setup_data()
        self.scheduler = self._make_scheduler()
        self.sched_step = 0
        self.slowdown = Slowdown(spec.slowdown.get(self.rank, 1.0), self.device)
        self.timeline: Any = None
        sampler = None
        if spec.timeline:
            self.timeline = Timeline(origin=ctx.t0)
            sampler = UtilizationSampler(self.device)
            sampler.start(now())
        self.sink = ScalarSink()
        self.ledger = RankLedger(self.rank, self.timeline, ctx.t0, sampler)
        self.tally = EpochTally(self.world, *self._who())
        self._make_controllers()
        self.next_epoch = 0
        self.global_step = 0
        self.window = 0
        self.cursor = 0  # elastic: the current epoch's committed batches
        self._epoch_calls = 0  # names each epoch's pool counter, even for a repeated epoch
        self.left: str | None = None  # why this rank can train no more (it left an epoch)
        self.metrics: list[EpochMetrics] = []
        self.leads_epoch = False  # whether this rank reports the epoch that just ended
        self.on_progress: Callable[[Progress], None] | None = None
        self.on_rollback: Callable[[int], None] | None = None
        self.on_commit: Callable[[int, list[int]], None] | None = None
        if spec.resume:
            load_checkpoint_into(self, spec.resume)
        self.forward_model, self._hook = self._wrap_for_sync()
        self._ddp_forward = False
        self._stepped = True
        self._compute_s = 0.0
        self._reported = 0
        warm_up(self.device, self.model)
        if self.world > 1 and not self.elastic:
            # Building the optimizer can take a second (torch imports lazily on first use), and
            # ranks get there at different times: without this, the first rank in would clock
            # that skew as idle in epoch 0 and ElChe's first timings would carry it.
            self.comm.barrier("start")

    @property
    def start_epoch(self) -> int:
        """The first epoch to run (after ``resume``, the one after the checkpoint)."""
        return self.next_epoch

    def _who(self) -> tuple[list[str], list[str]]:
        """Every rank's host and device (one exchange when the launch did not say)."""
        if self.ctx.hosts is not None and self.ctx.devices is not None:
            return self.ctx.hosts, self.ctx.devices
        mine = json.dumps([self.ctx.host, str(self.device)]).encode()
        got = [json.loads(b) for b in self.comm.exchange_bytes("who", mine)]
        return [g[0] for g in got], [g[1] for g in got]

    def _wrap_for_sync(self) -> tuple[nn.Module, Any]:
        """Sync with several ranks: the model inside DDP (and a check that the forward went
        through it); otherwise the model itself."""
        if not (self.spec.sync and self.world > 1):
            return self.model, None
        # Every rank steps on one full batch: the plain mean is the batch-weighted average.
        ddp, hook = wrap_sync(self.model, self.device, self.spec.mode.backend, self.spec.bf16_wire)
        ddp.register_forward_pre_hook(self._saw_forward)
        return ddp, hook

    def _make_optimizer(self, optim_factory: Callable[..., Any]) -> torch.optim.Optimizer:
        """The user's optimizer on this replica, its lr scaled by the run's ``lr_scale``."""
        opt = optim_factory(list(self.model.parameters()))
        if not isinstance(opt, torch.optim.Optimizer):
            raise ConfigError(
                f"optim_factory returned a {type(opt).__name__}; expected a "
                "torch.optim.Optimizer built on the parameters it was given"
            )
        scale = self.spec.lr_scale(self.world)
        if scale != 1.0:
            for g in opt.param_groups:
                g["lr"] = g["lr"] * scale
        return opt

    def _make_scheduler(self) -> Any:
        if self.spec.scheduler is None:
            return None
        sched = self.spec.scheduler(self.optimizer, self.total_steps)
        if not isinstance(sched, Scheduler) and not callable(getattr(sched, "step", None)):
            raise ConfigError(
                f"scheduler factory returned a {type(sched).__name__}; expected a "
                "flodl_core Scheduler or an object with .step()"
            )
        return sched

    def _make_controllers(self) -> None:
        """ElChe, the guard, the meta-controller, the averager and the round that drives them:
        identical copies on every rank, fed identical numbers."""
        s = self.spec
        self.elche = ElChe(
            self.world,
            s.anchor,
            overhead_target=s.overhead_target,
            max_anchor=s.max_anchor,
            min_anchor=s.min_anchor,
            max_batch_diff=s.max_batch_diff,
            speed_hint=s.speed_hint,
            partition_ratios=s.partition_ratios,
            relax_up=s.elche_relax_up,
        )
        self.guard = s.guard
        self.meta = MetaController() if s.meta_controller else None
        self.averager = Averager(
            self.model,
            on_host=s.mode.backend is Backend.CPU,
            easgd_alpha=s.easgd_alpha,
            outer=s.outer_optimizer,
        )
        if not s.sync:
            self.averager.reducer = self.ctx.reducer(self.averager)  # a collective
        self.overshoot = Overshoot(s.max_overshoot, self.batches_per_epoch)
        self.rounds = AveragingRound(
            self.comm,
            self.device,
            self.averager,
            self.elche,
            self.guard,
            self.meta,
            self.overshoot,
            self.tally,
            self.ledger,
        )

    # ---- data ---------------------------------------------------------------------------------

    def _setup_data(self) -> None:
        s = self.spec
        self.loader = DataLoader(
            s.dataset,
            batch_size=s.batch_size,
            device=self.device,
            seed=s.seed,
            shuffle=True,
            drop_last=True,
        )
        self.n_samples = self.loader.num_samples
        whole = self.n_samples // s.batch_size
        self.batches_per_epoch = min(whole, s.batches_per_epoch or whole)
        self.total_steps = self.batches_per_epoch * s.num_epochs

    def _open(self, epoch: int) -> Callable[[range], Iterator[Any]]:
        """``open(block)``: an iterator over the batches of a range of batch indices."""
        bs, loader = self.spec.batch_size, self.loader
        return lambda b: iter(loader.shard_range(b.start * bs, b.stop * bs).epoch(epoch))

    def _pool_work(self, epoch: int) -> RankWork:
        """Cadence / async: own slices by throughput share plus the shared pool (see
        :mod:`._worklist`); the pool's counter is a key unique to this epoch."""
        shares: list[float] | None = None
        if self.spec.partition_ratios is not None:
            shares = list(self.spec.partition_ratios)
        elif self.elche.calibrated:
            shares = self.elche.throughput_shares()
        plan = EpochWork.plan(self.batches_per_epoch, shares, self.world)
        self._epoch_calls += 1
        key = f"pool{self._epoch_calls}"
        if self.rank == 0 and self._epoch_calls > 2:
            self.comm.drop_counter(f"pool{self._epoch_calls - 2}")
        return RankWork(
            plan,
            self.rank,
            claim=lambda k: self._claim(key, k),
            peek=lambda: self.comm.counter(key, 0),
            size=lambda left: claim_size(left, self.world, self._speeds(), self.rank),
            open_block=self._open(epoch),
        )

    def _speeds(self) -> list[float] | None:
        """Every rank's batches per second as ElChe measured them (``None`` before that)."""
        ms, benched = self.elche.ms_per_batch, self.elche.benched
        if not self.elche.calibrated or any(m is None or m <= 0 for m in ms):
            return None
        return [0.0 if r in benched else 1000.0 / m for r, m in enumerate(ms)]  # type: ignore[operator]

    def _claim(self, key: str, k: int) -> int:
        self._settle_slowdown()  # claims in the order the ranks' clocks say
        return self.comm.counter(key, k) - k

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
        if self.spec.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.ledger.add_loss(loss)
        self._stepped = True

    def _saw_forward(self, module: nn.Module, args: Any) -> None:
        self._ddp_forward = True

    def _run_batch(self, batch: Any) -> Iterator[Any]:
        self.ctx.beacon.batch()
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
        self.ledger.tick()

    def _advance_schedule(self) -> None:
        s = self.scheduler
        if s is None:
            return
        if isinstance(s, Scheduler):
            s.apply(self.optimizer, self.global_step)
            return
        while self.sched_step < self.global_step:
            s.step()
            self.sched_step += 1

    def _lr(self) -> float:
        groups = self.optimizer.param_groups
        return float(groups[0]["lr"]) if groups else math.nan

    # ---- epochs -------------------------------------------------------------------------------

    def epoch(self, epoch: int) -> Iterator[Any]:
        """This rank's batches of ``epoch``; averages between batches as the policy says.

        Every rank must run each epoch to its end: the ranks count batches to know when to
        average. A rank whose loop leaves an epoch early tells the others at the round it
        would have reached (they raise :class:`DdpError` naming it) and raises the same
        error itself at its next call."""
        if self.left is not None:
            raise DdpError(self.left, rank=self.rank)
        ended = False
        try:
            yield from self._epoch(epoch)
            ended = True
        finally:
            if not ended:
                self._leave(epoch)

    def _leave(self, epoch: int) -> None:
        """The loop stopped iterating epoch ``epoch`` before its end (or a batch raised)."""
        self.left = (
            f"rank {self.rank} left epoch {epoch} before its end; every rank must run each "
            "epoch of session.epoch(n) to its end (the ranks count batches to know when to "
            "average)"
        )
        if not self.spec.sync and self.world > 1 and not self.elastic:
            # the others wait at this window's arrival exchange: tell them there, without
            # waiting for them (they may be stuck, and this rank may be failing)
            with contextlib.suppress(Exception):
                self.comm.post("n", json.dumps({"left": self.rank}).encode())

    def _epoch(self, epoch: int) -> Iterator[Any]:
        self.sink.install()
        t_epoch = now()
        self.next_epoch = epoch
        if self.cursor == 0:
            self.tally.reset()
            self.ledger.mark(epoch_start=epoch)
            if not self.spec.sync and self.elche.reprobe():
                self.ledger.event("reprobe", ranks=len(self.elche.counts))
        if self.spec.sync:
            yield from self._sync_epoch(epoch, t_epoch)
            return
        work = None if self.elastic else self._pool_work(epoch)
        try:
            finished = False
            while not finished:
                finished = yield from self._window(t_epoch, work)
        finally:
            if work is not None:
                work.close()
        # elastic: a heal at a window's start may have moved this rank to a later epoch
        self._end_epoch(self.next_epoch)

    def _sync_epoch(self, epoch: int, t_epoch: float) -> Iterator[Any]:
        """Sync: equal consecutive slices, every rank the same number of steps (lockstep)."""
        bs = self.spec.batch_size
        plan = partition(self.n_samples, self.world, epoch=epoch, seed=self.spec.seed)
        steps = min(min(len(s) // bs for s in plan), self.batches_per_epoch // self.world or 1)
        mine = plan[self.rank]
        it = iter(self.loader.shard_range(mine.start, mine.stop).epoch(epoch))
        start = now()
        self._compute_s = 0.0
        for i in range(steps):
            yield from self._run_batch(next(it))
            self.global_step += self.world
            self._advance_schedule()
            if self._progress_due(i + 1, steps, (0,)):
                self.ledger.flush_loss(i + 1 - int(self.ledger.numbers["loss_n"]))
                self._progress(
                    epoch,
                    i + 1,
                    steps,
                    self.ledger.numbers["loss_sum"],
                    self.ledger.numbers["loss_n"],
                    self.world,
                )
        self._settle_slowdown()
        self.ctx.beacon.set(WAITING)
        led = self.ledger
        led.flush_loss(steps - int(led.numbers["loss_n"]))
        led.add(
            compute=self._compute_s,
            batches=steps,
            comm_bytes=steps * self._hook.step_bytes if self._hook is not None else 0,
        )
        led.span("compute", start, now())
        numbers = {**led.take(*self.sink.take()), **self._epoch_extras(t_epoch, range(self.world))}
        got = self.comm.exchange_bytes("ep", json.dumps(numbers).encode())
        self.tally.add([json.loads(b) for b in got])
        self.tally.syncs += steps
        self.leads_epoch = self.rank == 0
        self._end_epoch(epoch)

    def _window(self, t_epoch: float, pool: RankWork | None) -> Generator[Any, None, bool]:
        """One averaging window of epoch ``next_epoch`` (a generator of its batches; returns
        whether the epoch ended). Elastic: a rank that heals at the window's start trains the
        window of the state it received; a window whose round fails or does not commit is
        rolled back."""
        snap = None
        try:
            members = self.membership.begin()  # elastic: may heal this rank into a later state
            # after the heal: what a failed window rolls back to is the committed state
            snap = self._snapshot() if self.elastic else None
            epoch = self.next_epoch
            work = pool if pool is not None else self._window_work(epoch, members)
            self.window += 1
            report = yield from self._train_window(work)
            arrival = self.rounds.average(report, members)
            self.ledger.flush_loss(report.done)
            extras = self._epoch_extras(t_epoch, members) if arrival.finished else {}
            numbers = {**self.ledger.take(*self.sink.take()), **extras}
            self.rounds.settle(arrival, members, report, self._lr(), numbers)
            self.leads_epoch = self.rank == min(members)
        except WindowVoid:
            self.membership.commit()  # every member votes; this one's vote is no
            self._roll_back(snap)
            return False
        if not self.membership.commit():
            self._roll_back(snap)
            return False
        if isinstance(work, WindowWork):
            self.cursor += work.size
            work.close()
        if self.on_commit is not None and self.leads_epoch:
            self.on_commit(self.window, list(self.elche.counts))
        self.global_step += sum(arrival.actual)
        self._advance_schedule()
        done_all = int(sum(r["batches"] for r in self.tally.ranks))
        if self._progress_due(done_all, self.batches_per_epoch, members):
            self._progress(
                epoch,
                done_all,
                self.batches_per_epoch,
                sum(r["loss_sum"] for r in self.tally.ranks),
                sum(r["loss_n"] for r in self.tally.ranks),
                1,
            )
        return arrival.finished

    def _train_window(self, work: RankWork | WindowWork) -> Generator[Any, None, WindowReport]:
        """This rank's batches of the window, until its gate says stop."""
        gate = self._gate(self._counts(), work)
        start, done = now(), 0
        self._compute_s = 0.0
        while gate.keep_going(done):
            batch = work.next()
            if batch is None:  # this rank's share of the epoch (or window) is done
                break
            yield from self._run_batch(batch)
            done += 1
        self._settle_slowdown()
        self.ctx.beacon.set(WAITING)
        more = work.has_more()
        gate.stop()
        return WindowReport(
            self.window,
            done,
            more,
            work.in_hand(),
            self._compute_s,
            start,
            gate.throttled,
            getattr(work, "drained", None),
        )

    def _counts(self) -> list[int]:
        """ElChe's counts for the next window, scaled down so a window is at most
        ``1 / reports_per_epoch`` of the epoch when progress reports are asked for (they fall
        on window ends)."""
        n = self.spec.reports_per_epoch
        if n <= 1:
            return self.elche.counts
        return self.elche.clamp_total(max(1, self.batches_per_epoch // n))

    def _window_work(self, epoch: int, members: tuple[int, ...]) -> WindowWork:
        """Elastic: this window's batches after the committed cursor, by ElChe's counts."""
        self.elche.set_members(members)
        counts = self._counts()
        return WindowWork(self.cursor, self.batches_per_epoch, counts, self.rank, self._open(epoch))

    def _gate(self, counts: list[int], work: RankWork | WindowWork) -> WindowGate:
        mine = counts[self.rank]
        async_ = self.spec.mode.policy is Policy.ASYNC
        waits, limit = False, mine
        if self.comm.has_counters:
            waits, limit = waiting(async_, self.elche.calibrated, self.overshoot, mine)
        tail = int(sum(counts) * TAIL_FRACTION)
        finish = (lambda: work.left() <= tail) if isinstance(work, RankWork) else None
        return WindowGate(
            self.comm,
            self.world,
            self.window,
            mine,
            waits=waits,
            limit=limit,
            max_batch_diff=self.spec.max_batch_diff,
            fill_late=async_ and self.elche.outpaces_slow_cohort(self.rank),
            settle=self._settle_slowdown,
            finish=finish,
        )

    # ---- epoch end ----------------------------------------------------------------------------

    def evaluator(self, members: Sequence[int]) -> int:
        """The rank that runs ``eval_fn`` (``eval_on``): the named rank, or the fastest member
        by ElChe's shares (the first member before any measurement, and in sync mode)."""
        ranks = list(members)
        if isinstance(self.spec.eval_on, int) and self.spec.eval_on in ranks:
            return self.spec.eval_on
        if self.spec.sync or not self.elche.calibrated:
            return ranks[0]
        shares = self.elche.throughput_shares()
        return max(ranks, key=lambda r: (shares[r], -r))  # type: ignore[no-any-return]

    def _epoch_extras(self, t_epoch: float, members: Sequence[int]) -> dict[str, Any]:
        """What a rank adds to its last numbers of an epoch: its wall time and peak memory, and
        the evaluation where it is the evaluator. The evaluator runs ``eval_fn`` before the
        exchange, where the others wait for it anyway: after it, they would start the next
        epoch and clock its evaluation as that epoch's idle time."""
        out: dict[str, Any] = {"wall": now() - t_epoch, "peak_memory": peak_memory(self.device)}
        if self.spec.eval_fn is not None and self.rank == self.evaluator(members):
            out["eval"] = run_eval(self.model, self.spec.eval_fn)
        return out

    def _end_epoch(self, epoch: int) -> None:
        sync = self.spec.sync
        m = combine_ranks(
            epoch,
            self.tally.ranks,
            batch_size=self.spec.batch_size,
            syncs=self.tally.syncs,
            sync_ms=self.tally.sync_ms,
            eval_value=self.tally.eval,
            anchor=None if sync else self.elche.anchor,
            lr=self._lr(),
            counts=None if sync else list(self.elche.counts),
        )
        self.metrics.append(m)
        self.ledger.mark(epoch_end=epoch, loss=m.avg_loss)
        self.next_epoch, self.cursor, self._reported = epoch + 1, 0, 0
        every = self.spec.checkpoint_every
        if every and (epoch + 1) % every == 0 and not self.elastic:
            save_checkpoint_from(self, epoch, str(self.spec.checkpoint_path))

    def _progress_due(self, done: int, total: int, members: Sequence[int]) -> bool:
        """Whether the epoch has passed another ``1 / reports_per_epoch`` of its batches (the
        first member reports; the epoch's end is the epoch's metrics)."""
        n = self.spec.reports_per_epoch
        if n <= 1 or total <= 0 or self.on_progress is None or self.rank != min(members):
            return False
        return min(n - 1, done * n // total) > self._reported

    def _progress(
        self, epoch: int, done: int, total: int, loss_sum: float, loss_n: float, ranks: int
    ) -> None:
        self._reported = min(
            self.spec.reports_per_epoch - 1, done * self.spec.reports_per_epoch // total
        )
        loss = loss_sum / loss_n if loss_n else math.nan
        samples = int(done * self.spec.batch_size * ranks)
        assert self.on_progress is not None
        self.on_progress(Progress(epoch, done / total, loss, samples))

    # ---- state ----------------------------------------------------------------------------

    def shared_state(self) -> dict[str, Any]:
        """What every rank holds alike: controllers, counters and the epoch's tally."""
        return {
            "elche": self.elche.state_dict(),
            "guard": self.guard.state_dict(),
            "meta": self.meta.state_dict() if self.meta is not None else None,
            "averager": self.averager.state_dict(),
            "overshoot": self.overshoot.state_dict(),
            "tally": self.tally.state_dict(),
            "next_epoch": self.next_epoch,
            "cursor": self.cursor,
            "window": self.window,
            "global_step": self.global_step,
        }

    def load_shared_state(self, state: dict[str, Any]) -> None:
        self.elche.load_state_dict(state["elche"])
        self.guard.load_state_dict(state["guard"])
        if self.meta is not None and state.get("meta") is not None:
            self.meta.load_state_dict(state["meta"])
        self.averager.load_state_dict(state["averager"])
        self.overshoot.load_state_dict(state["overshoot"])
        self.tally.load_state_dict(state["tally"])
        self.next_epoch, self.cursor = int(state["next_epoch"]), int(state["cursor"])
        self.window, self.global_step = int(state["window"]), int(state["global_step"])

    def rank_state(self) -> dict[str, Any]:
        """What is this rank's own: optimizer, RNG, scheduler position (and its replica under
        EASGD, whose replicas differ)."""
        out: dict[str, Any] = {
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "sched_step": self.sched_step,
        }
        if self.device.type == "cuda":
            out["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        if self.scheduler is not None and callable(getattr(self.scheduler, "state_dict", None)):
            out["scheduler"] = self.scheduler.state_dict()
        if self.averager.alpha is not None:
            out["params"] = [p.detach().to("cpu", copy=True) for p in self.model.parameters()]
        return out

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if "params" in state:
            with torch.no_grad():
                for p, t in zip(self.model.parameters(), state["params"], strict=True):
                    p.copy_(t)
        self.sched_step = int(state.get("sched_step", 0))
        if self.scheduler is not None and "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"])
        if "cuda_rng" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)

    def state_dict(self) -> dict[str, Any]:
        """The committed state a healing rank receives: model, optimizer, shared state."""
        model = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        return {
            "model": model,
            "optimizer": self.optimizer.state_dict(),
            "shared": self.shared_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.load_shared_state(state["shared"])

    def _snapshot(self) -> dict[str, Any]:
        model = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return {
            "model": model,
            "optimizer": copy.deepcopy(self.optimizer.state_dict()),
            "shared": copy.deepcopy(self.shared_state()),
        }

    def _roll_back(self, snap: dict[str, Any] | None) -> None:
        """A window that did not commit: back to its start (elastic runs), and what this rank
        trained and recorded in it, not handed on yet, forgotten."""
        self.ledger.flush_loss(0)
        self.ledger.take(*self.sink.take())
        if snap is not None:
            self.load_state_dict(snap)
            if self.on_rollback is not None:
                self.on_rollback(self.next_epoch)

    # ---- timeline and result ---------------------------------------------------------------

    def gather_timeline(self) -> Any:
        """Rank 0: every rank's timeline merged; other ranks: ``None``. A collective."""
        if self.timeline is None:
            return None
        blob = json.dumps(self.timeline.to_dict()).encode()
        parts = self.comm.exchange_bytes("tl", blob)
        if self.rank != 0:
            return None
        merged = Timeline.from_dict(json.loads(parts[0]))
        for b in parts[1:]:
            merged.merge(Timeline.from_dict(json.loads(b)))
        return merged

    def close(self) -> None:
        """Release what the engine holds in its thread (the scalar sink, the GPU poller)."""
        self.sink.uninstall()
        if self.ledger.sampler is not None:
            self.ledger.sampler.close()

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
