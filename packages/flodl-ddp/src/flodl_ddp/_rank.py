"""One rank's training engine, for every way a run is launched and both tiers.

:class:`RankEngine` owns the replica, its optimizer, the data, ElChe, the guard and the averager;
what differs between a static world, torchrun and an elastic quorum comes in through the
:class:`RankContext` (``comm``, ``membership``, ``reducer``). The loop is a generator: ``for batch
in engine.epoch(k)`` yields this rank's batches, the caller calls ``engine.step(loss)``, and
between batches the generator decides when to average, from numbers every rank received in the
same exchange. Elastic windows start with the quorum (a rank behind heals from a peer), take the
batches after the epoch's committed cursor (:class:`~._worklist.WindowWork`), and a window whose
round does not commit is rolled back and planned again over the survivors.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, DataLoader
from flodl_core.optim import Scheduler
from flodl_monitor import ResourceSampler, Timeline

from ._average import Averager
from ._comm import Comm
from ._elche import ElChe
from ._engine_state import EngineState
from ._errors import DdpError, PeerError
from ._ft import WindowVoid
from ._gate import Overshoot, Pace, WindowGate, finish_at, waiting, with_tail
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
from ._rounds import AveragingRound, WindowReport, left_early
from ._slowdown import Slowdown
from ._sync_hook import wrap_sync
from ._warmup import warm_up
from ._watchdog import WAITING, Beacon
from ._worklist import EpochWork, Opener, RankWork, WindowWork, claim_size

Work = RankWork | WindowWork


@dataclass
class RankContext:
    """Where a rank runs and what it talks through. ``reducer(averager)`` picks the rounds'
    reduction (a collective); ``hosts`` / ``devices`` of every rank (``None``: exchanged)."""

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


class RankEngine(EngineState):
    """One rank of a run (module doc): ``spec`` the checked run, ``model`` this rank's replica on
    ``ctx.device``, ``optim_factory(params) -> torch.optim.Optimizer``.

    ``on_event(kind, value)`` hears ``"progress"`` (a :class:`Progress`), ``"rollback"`` (the
    epoch) and ``"commit"`` (``(window, counts)``, from a window's leader) when set."""

    def __init__(
        self, spec: RunSpec, ctx: RankContext, model: nn.Module, optim_factory: Callable[..., Any]
    ) -> None:
        self.spec, self.ctx, self.model = spec, ctx, model
        self.rank, self.world, self.device = ctx.rank, ctx.world_size, ctx.device
        self.comm, self.membership = ctx.comm, ctx.membership
        self.elastic = ctx.membership.elastic
        self.membership.agree(model, self.comm, self.device, spec.mode.backend)
        # Identical init on every rank above; from here each rank draws its own randomness.
        torch.manual_seed(spec.seed * 1009 + 7919 * (self.rank + 1))
        self.optimizer = self._make_optimizer(optim_factory)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=spec.grad_scaler)
        self._setup_data()
        self.scheduler = self._make_scheduler()
        self.slowdown = Slowdown(spec.slowdown.get(self.rank, 1.0), self.device)
        self._make_recorders()
        self._make_controllers()
        self.next_epoch = self.global_step = self.window = self.cursor = self.sched_step = 0
        self._epoch_calls = self._reported = 0  # pool keys per epoch call; progress reports
        self.left: str | None = None  # why this rank can train no more (it left an epoch)
        self.metrics: list[EpochMetrics] = []
        self.leads_epoch = self.stopping = False  # reports the last epoch; asked to stop there
        self.on_event: Callable[[str, Any], None] | None = None
        if spec.resume:
            load_checkpoint_into(self, spec.resume)
        self.forward_model, self._hook = self._wrap_for_sync()
        self._ddp_forward, self._stepped, self._compute_s = False, True, 0.0
        self._last, self._share = True, 1.0  # the batch's part being trained
        warm_up(self.device, self.model)
        if self.world > 1 and not self.elastic:  # or ElChe's first timings carry the ranks'
            self.comm.barrier("start")  # skew in building the optimizer (lazy torch imports)

    def _make_recorders(self) -> None:
        """The timeline (with utilization samples), the scalar sink, this rank's ledger and the
        epoch's tally of every rank (their hosts and devices told once, when not known)."""
        self.timeline: Any = Timeline(origin=self.ctx.t0) if self.spec.timeline else None
        gpus = None if self.device.type == "cuda" else []  # GPUs are polled only for a CUDA rank
        sampler = ResourceSampler(gpus=gpus) if self.timeline is not None else None
        self.sink = ScalarSink()
        self.ledger = RankLedger(self.rank, self.timeline, self.ctx.t0, sampler)
        hosts, devices = self.ctx.hosts, self.ctx.devices
        if hosts is None or devices is None:
            mine = json.dumps([self.ctx.host, str(self.device)]).encode()
            got = [json.loads(b) for b in self.comm.exchange_bytes("who", mine)]
            hosts, devices = [g[0] for g in got], [g[1] for g in got]
        self.tally = EpochTally(self.world, hosts, devices)

    def _wrap_for_sync(self) -> tuple[nn.Module, Any]:
        """Sync with several ranks: the model inside DDP (whose plain mean is the weighted
        average: every rank steps on one full batch) and its hook; otherwise the model."""
        if not (self.spec.sync and self.world > 1):
            return self.model, None
        s = self.spec
        unused = s.find_unused_parameters
        ddp, hook = wrap_sync(self.model, self.device, s.mode.backend, s.bf16_wire, None, unused)
        ddp.register_forward_pre_hook(lambda *_: setattr(self, "_ddp_forward", True))
        return ddp, hook

    def _make_optimizer(self, optim_factory: Callable[..., Any]) -> torch.optim.Optimizer:
        """The user's optimizer on this replica, its lr scaled by the run's ``lr_scale``."""
        opt = optim_factory(list(self.model.parameters()))
        if not isinstance(opt, torch.optim.Optimizer):
            raise ConfigError(
                f"optim_factory returned a {type(opt).__name__}, not a torch.optim.Optimizer"
            )
        for g in opt.param_groups:
            g["lr"] = g["lr"] * self.spec.lr_scale(self.world)
        return opt

    def _make_scheduler(self) -> Any:
        if self.spec.scheduler is None:
            return None
        sched = self.spec.scheduler(self.optimizer, self.total_steps)
        if not isinstance(sched, Scheduler) and not callable(getattr(sched, "step", None)):
            raise ConfigError(
                f"scheduler factory returned a {type(sched).__name__}: no Scheduler, no .step()"
            )
        return sched

    def _make_controllers(self) -> None:
        """ElChe, the guard, the meta-controller, the averager and the round that drives them:
        identical copies on every rank, fed identical numbers."""
        s = self.spec
        self.elche = elche = ElChe(self.world, s.anchor, **s.elche_options())
        self.guard, self.meta = s.guard, MetaController() if s.meta_controller else None
        on_host = s.mode.backend is Backend.CPU
        self.averager = avg = Averager(
            self.model, on_host=on_host, easgd_alpha=s.easgd_alpha, outer=s.outer_optimizer
        )
        if not s.sync:
            avg.reducer = self.ctx.reducer(avg)  # a collective
        self.overshoot = over = Overshoot(s.max_overshoot, self.batches_per_epoch)
        self.rounds = AveragingRound(
            self.comm, self.device, avg, elche, s.guard, self.meta, over, self.tally, self.ledger
        )

    def _setup_data(self) -> None:
        s = self.spec
        kw = {"batch_size": s.batch_size, "seed": s.seed, "num_workers": s.num_workers}
        self.loader = DataLoader(s.dataset, device=self.device, drop_last=True, **kw)
        self.n_samples = self.loader.num_samples
        whole = self.n_samples // s.batch_size
        self.batches_per_epoch = min(whole, s.batches_per_epoch or whole)
        self.total_steps = self.batches_per_epoch * s.num_epochs

    def _open(self, epoch: int) -> Opener:
        """An :data:`~._worklist.Opener` over this epoch's batches."""
        bs, loader = self.spec.batch_size, self.loader
        return lambda b: iter(loader.shard_range(b.start * bs, b.stop * bs).epoch(epoch))

    def _pool_work(self, epoch: int) -> RankWork:
        """Cadence / async: own slices by throughput share plus the shared pool (see
        :mod:`._worklist`); the pool's counter is a key unique to this epoch call."""
        shares = self.spec.partition_ratios
        if shares is None and self.elche.calibrated:
            shares = tuple(self.elche.throughput_shares())
        plan = EpochWork.plan(self.batches_per_epoch, shares, self.world)
        self._epoch_calls += 1
        key = f"pool{self._epoch_calls}"
        if self.rank == 0 and self._epoch_calls > 2:
            self.comm.drop_counter(f"pool{self._epoch_calls - 2}")
        claim, peek = partial(self._claim, key), partial(self.comm.counter, key, 0)
        return RankWork(plan, self.rank, claim, peek, self._claim_size, self._open(epoch))

    def _claim_size(self, left: int, pace: tuple[float, float] | None) -> int:
        """:func:`claim_size` by every rank's batches per second as ElChe measured them (0 when
        benched; before any measurement, by this rank's pace)."""
        ms, benched, speeds = self.elche.ms_per_batch, self.elche.benched, None
        if self.elche.calibrated and all(ms):
            speeds = [0.0 if r in benched else 1000.0 / m for r, m in enumerate(ms)]  # type: ignore[operator]
        return claim_size(left, self.world, speeds, self.rank, pace)

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

    def step(self, loss: Tensor) -> None:
        """Backward, then (at a batch's last micro-batch) per-rank clipping, optimizer step and
        zero_grad; the loss is recorded."""
        if not isinstance(loss, Tensor) or loss.numel() != 1:
            shape = f" of shape {tuple(loss.shape)}" if isinstance(loss, Tensor) else ""
            raise ConfigError(
                "the loss (what train_step returns, what step(loss) is given) must be a scalar "
                f"tensor, got {type(loss).__name__}{shape}"
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
        try:
            self.scaler.scale(loss * self._share).backward()
        except RuntimeError as e:  # sync: a rank that left its epoch ends the gradient exchange
            gone: list[int] = []
            with contextlib.suppress(Exception):  # the store may have gone with that rank
                gone = [r for r in range(self.world) if self.comm.counter(f"left{r}", 0)]
            if self._hook is None or not gone:
                raise
            self.left = left_early(gone[0], "the epoch")
            raise PeerError(self.left, rank=self.rank) from e
        self.ledger.add_loss(loss * self._share)
        self._stepped = True
        if not self._last:  # a micro-batch: its gradients add up with the next ones'
            return
        if self.spec.max_grad_norm is not None:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.spec.max_grad_norm)
        self.scaler.step(self.optimizer)  # skipped when a gradient is inf / NaN
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)

    def _run_batch(self, batch: Any) -> Iterator[Any]:
        """One batch, yielded as its ``micro_batches`` parts: one ``step(loss)`` each, the
        optimizer's at the last (DDP reduces the gradients then, once)."""
        self.ctx.beacon.batch()
        t, parts = now(), batch.split(self.spec.micro_batches)
        for i, part in enumerate(parts):
            self._stepped, self._last = False, i == len(parts) - 1
            self._share = len(part[0]) / len(batch[0])  # of the batch's mean loss
            if self._hook is not None:
                self.forward_model.require_backward_grad_sync = self._last
            yield part
            if not self._stepped:
                self._stepped = True  # no batch is open any more: a late step() is refused too
                raise DdpError(
                    "a batch was taken from the epoch without step(loss): call step(loss) once "
                    "per batch (the ranks count batches to know when to average)"
                )
        self.slowdown.after_batch(t)
        self._compute_s += now() - t
        self.ledger.tick(self.device)

    def _advance_schedule(self) -> None:
        s = self.scheduler
        if isinstance(s, Scheduler):
            s.apply(self.optimizer, self.global_step)
            return
        while s is not None and self.sched_step < self.global_step:
            s.step()
            self.sched_step += 1

    def _lr(self) -> float:
        groups = self.optimizer.param_groups
        return float(groups[0]["lr"]) if groups else math.nan

    def epoch(self, epoch: int) -> Iterator[Any]:
        """This rank's batches of ``epoch``; averages between batches as the policy says.

        Every rank must run each epoch to its end (the ranks count batches to know when to
        average): a rank whose loop leaves an epoch early tells the others at the round they
        will reach (they raise a :class:`DdpError` naming it) and raises one itself at its next
        call."""
        if self.left is not None:
            raise DdpError(self.left, rank=self.rank)
        ended = False
        try:
            yield from self._epoch(epoch)
            ended = True
        except PeerError as e:  # another rank's failure: say its name, not this rank's
            self.left = e.message
            raise
        finally:
            if not ended and self.left is None:
                self._leave(epoch)

    def _leave(self, epoch: int) -> None:
        self.left = left_early(self.rank, f"epoch {epoch}")
        if self.world > 1 and not self.elastic:  # told where the others look, without waiting:
            with contextlib.suppress(Exception):  # the window's arrival; sync: a failed backward
                self.comm.post("n", json.dumps({"left": self.rank}).encode())
                self.comm.counter(f"left{self.rank}", 1)

    def _epoch(self, epoch: int) -> Iterator[Any]:
        self.sink.install()
        t_epoch = now()
        self.next_epoch = epoch
        if self.cursor == 0:  # elastic: a rank healed mid-epoch keeps the tally it received
            self.tally.reset()
            self.ledger.mark(epoch_start=epoch)
            if not self.spec.sync and self.elche.reprobe():
                self.ledger.event("reprobe")
        if self.spec.sync:
            yield from self._sync_epoch(epoch, t_epoch)
            return
        work = None if self.elastic else self._pool_work(epoch)
        try:
            while not (yield from self._window(t_epoch, work)):
                pass
        finally:
            if work is not None:
                work.close()
        # elastic: a heal at a window's start may have moved this rank to a later epoch
        self._end_epoch(self.next_epoch)

    def _sync_epoch(self, epoch: int, t_epoch: float) -> Iterator[Any]:
        """Sync: equal consecutive slices, every rank the same number of steps (lockstep)."""
        bs, led = self.spec.batch_size, self.ledger
        plan = partition(self.n_samples, self.world, epoch=epoch, seed=self.spec.seed)
        steps = min(min(len(s) // bs for s in plan), self.batches_per_epoch // self.world or 1)
        it = iter(self.loader.shard_range(plan[self.rank].start, plan[self.rank].stop).epoch(epoch))
        start, self._compute_s = now(), 0.0
        for i in range(1, steps + 1):
            yield from self._run_batch(next(it))
            self.global_step += self.world
            self._advance_schedule()
            if self._progress_due(i, steps, (0,)):
                led.flush_loss(i - int(led.numbers["loss_n"]))
                self._progress(epoch, i, steps, led.numbers, self.world)
        self._settle_slowdown()
        self.ctx.beacon.set(WAITING)
        led.flush_loss(steps - int(led.numbers["loss_n"]))
        step_bytes = self._hook.step_bytes if self._hook is not None else 0
        led.add(compute=self._compute_s, batches=steps, comm_bytes=steps * step_bytes)
        led.span("compute", start, now())
        numbers = {**led.take(*self.sink.take()), **self._epoch_extras(t_epoch, range(self.world))}
        self.tally.add(
            [json.loads(b) for b in self.comm.exchange_bytes("ep", json.dumps(numbers).encode())]
        )
        self.tally.syncs += steps
        self.leads_epoch = self.rank == 0
        self._end_epoch(epoch)

    def _window(self, t_epoch: float, pool: RankWork | None) -> Generator[Any, None, bool]:
        """One averaging window of epoch ``next_epoch`` (yields its batches, returns whether the
        epoch ended); elastic: one that fails or does not commit is rolled back."""
        snap = None
        try:
            members = self.membership.begin()  # elastic: may heal this rank into a later state
            snap = self.snapshot() if self.elastic else None
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
            return self._roll_back(snap)
        if not self.membership.commit():
            return self._roll_back(snap)
        if isinstance(work, WindowWork):
            self.cursor += work.size
            work.close()
        if self.leads_epoch:
            self._emit("commit", (self.window, self.elche.counts))
        self.global_step += sum(arrival.actual)
        self._advance_schedule()
        done = int(sum(r["batches"] for r in self.tally.ranks))
        if self._progress_due(done, self.batches_per_epoch, members):
            numbers = {k: sum(r[k] for r in self.tally.ranks) for k in ("loss_sum", "loss_n")}
            self._progress(epoch, done, self.batches_per_epoch, numbers, 1)
        return arrival.finished

    def _train_window(self, work: Work) -> Generator[Any, None, WindowReport]:
        """This rank's batches of the window, until its gate says stop."""
        gate = self._gate(self._counts(), work)
        start, done, self._compute_s = now(), 0, 0.0
        while gate.keep_going(done) and (batch := work.next()) is not None:
            yield from self._run_batch(batch)
            done += 1
        self._settle_slowdown()
        self.ctx.beacon.set(WAITING)
        more = work.has_more()
        gate.stop()
        drained = getattr(work, "drained", None)
        return WindowReport(
            self.window, done, more, work.in_hand(), self._compute_s, start, gate.throttled, drained
        )

    def _counts(self) -> list[int]:
        """ElChe's counts: cut to 1/reports_per_epoch of the epoch (reports fall on window ends;
        :func:`~._worklist.cut_to`), or a static window's grown by its tail (:func:`with_tail`)."""
        n, e = self.spec.reports_per_epoch, self.elche
        if n > 1:
            return e.clamp_total(max(self.world, self.batches_per_epoch // n))
        return e.counts if self.elastic else with_tail(e.counts, self._left_in_epoch())

    def _left_in_epoch(self) -> int:
        return self.batches_per_epoch - int(sum(r["batches"] for r in self.tally.ranks))

    def _window_work(self, epoch: int, members: tuple[int, ...]) -> WindowWork:
        """Elastic: this window's batches after the committed cursor, by ElChe's counts."""
        self.elche.set_members(members)
        return WindowWork(
            self.cursor, self.batches_per_epoch, self._counts(), self.rank, self._open(epoch)
        )

    def _gate(self, counts: list[int], work: Work) -> WindowGate:
        mine, async_ = counts[self.rank], self.spec.mode.policy is Policy.ASYNC
        outpaces = self.elche.outpaces_slow_cohort
        pace = Pace(outpaces(self.rank), any(map(outpaces, self.elche.members)))
        waits, limit = False, mine
        if self.comm.has_counters:
            waits, limit = waiting(async_, self.elche.calibrated, self.overshoot, mine, pace)
        at, capped = None, self.spec.max_batch_diff is not None
        if isinstance(work, RankWork):
            at = finish_at(counts, mine, self._left_in_epoch(), pace, capped)
        finish = (lambda: work.left() <= at) if at is not None else None
        return WindowGate(
            self.comm,
            self.world,
            self.window,
            mine,
            waits=waits,
            limit=limit,
            max_batch_diff=self.spec.max_batch_diff,
            fill_late=waits and pace.outpaces,
            settle=self._settle_slowdown,
            finish=finish,
        )

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
        """A rank's last numbers of an epoch: wall time, peak memory, and on the evaluator the
        evaluation (before the exchange, where the others wait anyway)."""
        out: dict[str, Any] = {"wall": now() - t_epoch, "peak_memory": peak_memory(self.device)}
        out["stop"] = self.comm.counter("stop", 0) if self.comm.has_counters else 0
        if self.spec.eval_fn is not None and self.rank == self.evaluator(members):
            out["eval"] = run_eval(self.model, self.spec.eval_fn)
        return out

    def _end_epoch(self, epoch: int) -> None:
        sync, t = self.spec.sync, self.tally
        if not sync:
            benched = self.elche.benched
            ms = {k: [1000.0 * r[k] for r in t.ranks] for k in ("wall", "compute", "idle")}
            batches = [int(r["batches"]) for r in t.ranks]
            self.elche.judge_epoch(ms["wall"], batches, ms["compute"], ms["idle"])
            for r in set(self.elche.benched) - set(benched):
                self.rounds.tell_benched(r)
        anchor, counts = (None, None) if sync else (self.elche.anchor, self.elche.counts)
        m = combine_ranks(epoch, t, self.spec.batch_size, self._lr(), anchor, counts)
        self.stopping = any(r.get("stop") for r in t.ranks)  # asked of any rank: all agree
        self.metrics.append(m)
        self.ledger.mark(epoch_end=epoch, loss=m.avg_loss)
        self.next_epoch, self.cursor, self._reported = epoch + 1, 0, 0
        every = self.spec.checkpoint_every
        if every and (epoch + 1) % every == 0 and not self.elastic:
            save_checkpoint_from(self, epoch, str(self.spec.checkpoint_path))

    def _progress_due(self, done: int, total: int, members: Sequence[int]) -> bool:
        """Whether the epoch passed another ``1 / reports_per_epoch`` of its batches (the first
        member reports; the epoch's end is the epoch's metrics)."""
        n = self.spec.reports_per_epoch
        if n <= 1 or not 0 < done < total or self.on_event is None or self.rank != min(members):
            return False
        return min(n - 1, done * n // total) > self._reported

    def _progress(
        self, epoch: int, done: int, total: int, numbers: dict[str, float], ranks: int
    ) -> None:
        n = self.spec.reports_per_epoch
        self._reported = min(n - 1, done * n // total)
        loss = numbers["loss_sum"] / numbers["loss_n"] if numbers["loss_n"] else math.nan
        samples = done * self.spec.batch_size * ranks
        self._emit("progress", Progress(epoch, done / total, loss, samples))

    def _emit(self, kind: str, value: Any) -> None:
        if self.on_event is not None:
            self.on_event(kind, value)

    def _roll_back(self, snap: dict[str, Any] | None) -> bool:
        """A window that did not commit (elastic): back to its start, and what this rank
        trained and recorded in it, not handed on yet, forgotten. The epoch goes on."""
        self.ledger.flush_loss(0)
        self.ledger.take(*self.sink.take())
        if snap is not None:
            self.load_state_dict(snap)
            self._emit("rollback", self.next_epoch)
        return False

    def gather_timeline(self) -> Any:
        """Rank 0: every rank's timeline merged; other ranks: ``None``. A collective."""
        if self.timeline is None:
            return None
        parts = self.comm.exchange_bytes("tl", json.dumps(self.timeline.to_dict()).encode())
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
        return state_of(self.model, self.averager.final_params())
