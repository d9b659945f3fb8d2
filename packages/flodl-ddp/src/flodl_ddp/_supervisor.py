"""Watching the rank processes of a spawned run: one supervisor for static and elastic runs.

It starts one process per rank (spawn context), reads their messages from one queue, polls their
exit codes and runs the watchdog over their beacons. A static run fails at the first trouble,
naming the rank at fault (:func:`blame`); an elastic run's policy (:mod:`._elastic_launch`)
restarts ranks. A rank that delivered its result and then dies in teardown is not a failure.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.multiprocessing as mp

from flodl_monitor import Timeline

from ._errors import DdpError
from ._handle import DdpHandle
from ._messages import Counts, Done, Epoch, Failed, Final, Healed, Listening, Report, RolledBack
from ._watchdog import Watchdog, process_stopped
from ._worker import RankPayload, SpawnLink, load_state, spawn_picklable

logger = logging.getLogger("flodl.ddp")

ERROR_GRACE_S = 1.0  # after a first failure, wait this long for the root cause to arrive
TERM_GRACE_S = 3.0  # SIGTERM, then SIGKILL after this long
FINISH_GRACE_S = 5.0  # elastic: after the result, how long finished ranks get to exit
MAIN_GUARD_EXIT = 97  # the exit code of a rank process that re-ran the launching script
MAIN_GUARD = (
    'the script that started the run has no `if __name__ == "__main__":` guard, so each rank '
    "process ran it again from the top; put the code that builds and runs the Trainer under "
    "that guard"
)
_EVENTS = {Healed: "healed", Counts: "counts", RolledBack: "rollback"}  # handle.events kinds


def refuse_unguarded_rerun() -> None:
    """Leave at once (exit code ``MAIN_GUARD_EXIT``, one line on stderr) when this process is a
    spawned rank re-running the launching script from the top: it must not build a launch (a
    start-up line, a store, a temp folder) that ``os._exit`` would then leave behind."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        print(f"flodl-ddp: {MAIN_GUARD}", file=sys.stderr, flush=True)
        os._exit(MAIN_GUARD_EXIT)


def stop_processes(procs: list[Any]) -> None:
    """Stop every live process of ``procs``: SIGCONT (a stopped process handles signals only
    once it runs again), SIGTERM, then SIGKILL for those still alive ``TERM_GRACE_S`` later."""
    alive = [p for p in procs if p.pid is not None and p.exitcode is None]
    for p in alive:
        with contextlib.suppress(Exception):
            os.kill(p.pid, signal.SIGCONT)
            p.terminate()
    deadline = time.monotonic() + TERM_GRACE_S
    for p in alive:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in alive:
        if p.exitcode is None:
            with contextlib.suppress(Exception):
                p.kill()
            p.join(5.0)


def how_it_died(code: int) -> str:
    if code == MAIN_GUARD_EXIT:
        return f"could not start: {MAIN_GUARD}"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {-code} ({signal.Signals(-code).name})"
        return f"was killed by signal {-code}"
    return f"exited with code {code} without reporting an error (out of memory? killed?)"


@dataclass
class Watch:
    """What the supervisor has heard and seen so far."""

    done: set[int] = field(default_factory=set)
    final: Final | None = None
    final_at: float | None = None
    errors: list[Failed] = field(default_factory=list)
    deaths: dict[int, int] = field(default_factory=dict)
    verdicts: list[tuple[int, str]] = field(default_factory=list)
    first_fail: float | None = None
    last_epoch: int = -1

    def trouble(self) -> None:
        self.first_fail = self.first_fail or time.monotonic()


def blame(w: Watch, host: str) -> DdpError:
    """The run's one error, naming the rank at fault: a death by a signal first (it causes the
    connection errors its peers then report), then a rank the watchdog found stopped or hung,
    then a rank's own exception, then its peers' echoes of it, then a silent exit."""
    for r, code in sorted(w.deaths.items()):
        if code < 0:
            return DdpError(f"rank {r} {how_it_died(code)}", rank=r, host=host)
    for r, why in w.verdicts:
        return DdpError(f"rank {r} {why}; the others cannot go on without it", rank=r, host=host)
    causes = [e for e in w.errors if not e.echo] or w.errors
    if causes:
        e = causes[0]
        text = f"rank {e.rank} failed: {e.text}"
        return DdpError(text, rank=e.rank, host=e.host, remote_traceback=e.traceback)
    r, code = min(w.deaths.items())
    return DdpError(f"rank {r} {how_it_died(code)}", rank=r, host=host)


class Supervisor:
    """Starts, watches and tears down the rank processes of one run (module doc), feeding
    ``handle`` from its thread: ``entry(rank, generation, payload, link)`` in one process per
    device of ``payload``; ``limits``: the watchdog's ``(hang_s, stop_s, wait_s)``; ``policy``:
    the elastic policy (``None``: a static run); ``link``: the launch's :class:`SpawnLink` fields
    (``port`` and ``key``, or ``elastic``)."""

    def __init__(
        self,
        handle: DdpHandle,
        payload: RankPayload,
        entry: Callable[..., None],
        limits: tuple[float, float, float],
        policy: Any = None,
        **link: Any,
    ) -> None:
        self.handle, self.payload, self.entry, self.elastic = handle, payload, entry, policy
        self.world, self.ctx = len(payload.devices), mp.get_context("spawn")
        self.queue = self.ctx.Queue()
        self.tmp = tempfile.TemporaryDirectory(prefix="flodl-ddp-")
        beacons = [self.ctx.Array(kind, self.world, lock=False) for kind in "qb"]
        self.link = SpawnLink(self.queue, self.tmp.name, time.time(), os.getpid(), *beacons, **link)
        self.watchdog = Watchdog(*beacons, *limits, self._judged)
        self.generation, self.restarts, self.watch = [0] * self.world, 0, Watch()
        self.procs: list[Any] = []
        self.all_procs: list[Any] = []  # every generation's
        self._stopping, self._lock = threading.Event(), threading.Lock()
        self._reported: set[tuple[int, int]] = set()  # (rank, generation) deaths handled

    def start(self) -> None:
        """Start every rank and the watching thread."""
        try:
            self.procs = [self._spawn(r) for r in range(self.world)]
        except BaseException as e:
            self._close()
            if isinstance(e, Exception):  # name what would not pickle, if that was it
                spawn_picklable(self.payload, dataset=True)
            raise
        threading.Thread(target=self.run, name="flodl-ddp-supervisor", daemon=True).start()

    def _spawn(self, rank: int) -> Any:
        args, name = (rank, self.generation[rank], self.payload, self.link), f"flodl-ddp-rank{rank}"
        p = self.ctx.Process(target=self.entry, args=args, name=name, daemon=True)
        p.start()
        self.all_procs.append(p)
        return p

    def restart(self, rank: int) -> None:
        """Start rank ``rank`` again (it must be dead)."""
        with self._lock:
            if not 0 <= rank < self.world:
                raise DdpError(f"restart_rank: rank {rank} is not in 0..{self.world - 1}")
            old = self.procs[rank]
            if old.exitcode is None:
                raise DdpError(f"restart_rank: rank {rank} (pid {old.pid}) is still running")
            self._respawn(rank)

    def _respawn(self, rank: int) -> None:
        self.generation[rank] += 1
        self.elastic.reset(rank)
        self.watchdog.reset(rank)
        self.procs[rank] = p = self._spawn(rank)
        gen = self.generation[rank]
        self._event("restarted", rank, generation=gen)
        logger.info("elastic: rank %d restarted (generation %d, pid %d)", rank, gen, p.pid)

    def stop(self) -> None:
        self._stopping.set()

    def _event(self, kind: str, rank: int, **fields: Any) -> None:
        self.handle.events.append({"event": kind, "rank": rank, "t": time.time(), **fields})

    def run(self) -> None:
        try:
            while not self._step():
                pass
        except BaseException as e:  # the supervisor itself must never leave ranks behind
            self._resolve(DdpError(f"the run's supervisor failed: {type(e).__name__}: {e}"))

    def _step(self) -> bool:
        """Take one message, or look at the processes; ``True`` once the run is resolved."""
        try:
            self._take(self.queue.get(timeout=0.05))
            return False  # drain the queue before looking at exit codes
        except queue.Empty:
            pass
        if self._stopping.is_set():
            return self._resolve(DdpError("the run was stopped by DdpHandle.stop()"))
        with self._lock:
            procs = self.procs
            self.watchdog.check(
                lambda r: procs[r].exitcode is None, lambda r: process_stopped(procs[r].pid)
            )
            self._deaths()
        outcome = self.elastic.outcome(self) if self.elastic else self._static_outcome()
        return outcome is not None and self._resolve(outcome)

    def _static_outcome(self) -> DdpError | str | None:
        """A fixed world: any failure fails the run, after ``ERROR_GRACE_S`` for the cause."""
        w, exited = self.watch, all(p.exitcode is not None for p in self.procs)
        failed = w.first_fail is not None
        if failed and (exited or time.monotonic() - w.first_fail >= ERROR_GRACE_S):
            return blame(w, socket.gethostname())
        if len(w.done) == self.world and w.final is not None:
            for p in self.procs:
                p.join(10.0)  # anything still there after delivering is only teardown
            return w.final.path
        if exited and len(w.done) < self.world:
            missing = [r for r in range(self.world) if r not in w.done]
            return DdpError(f"ranks {missing} exited without delivering their results")
        return None

    def _take(self, msg: Any) -> None:
        w = self.watch
        if isinstance(msg, Epoch):
            if msg.metrics.epoch > w.last_epoch and w.final is None:
                w.last_epoch = msg.metrics.epoch
                self.handle._push_metrics(msg.metrics)
        elif isinstance(msg, Report):
            self.handle._push_progress(msg.progress)
        elif isinstance(msg, Final):
            w.final = w.final or msg
        elif isinstance(msg, Done):
            w.done.add(msg.rank)
            if msg.fingerprint:
                self.handle.fingerprints[msg.rank] = list(msg.fingerprint)
        elif isinstance(msg, Failed):
            w.errors.append(msg)
            w.trouble()
        elif isinstance(msg, Listening):
            ports, gen = msg.ports, msg.generation
            logger.info("elastic: rank %d (generation %d) listens on %s", msg.rank, gen, ports)
        elif type(msg) in _EVENTS:
            fields = {k: v for k, v in vars(msg).items() if k not in ("rank", "generation")}
            self._event(_EVENTS[type(msg)], msg.rank, **fields)

    def _judged(self, rank: int, why: str, seconds: float) -> None:
        """The watchdog found ``rank`` stopped or hung."""
        self.watch.verdicts.append((rank, why))
        self.watch.trouble()
        self._event("watchdog", rank, why=why, stalled_s=seconds)
        if self.elastic is not None:
            p = self.procs[rank]
            logger.warning("elastic: rank %d (pid %s) %s: killed", rank, p.pid, why)
            with contextlib.suppress(Exception):
                os.kill(p.pid, signal.SIGKILL)
                os.kill(p.pid, signal.SIGCONT)  # a stopped process dies only once it runs again

    def _deaths(self) -> None:
        for r, p in enumerate(self.procs):
            key = (r, self.generation[r])
            if p.exitcode is None or key in self._reported:
                continue
            self._reported.add(key)
            if p.exitcode == 0 or (r in self.watch.done and self.watch.final is not None):
                continue  # finished, or teardown after delivering
            self.watch.deaths[r] = p.exitcode
            if self.elastic is None:
                self.watch.trouble()
            else:
                self.elastic.died(self, r, p)

    def _resolve(self, outcome: DdpError | str) -> bool:
        """Tear down, remove the temporary folder (the trained weights), resolve the handle."""
        with contextlib.suppress(Exception):
            stop_processes(self.all_procs)
        state = None
        if isinstance(outcome, str):
            try:
                state = load_state(outcome)
            except Exception as e:
                outcome = DdpError(f"the trained state could not be read back: {e}")
        self._close()
        if state is None:
            self.handle._fail(outcome)  # type: ignore[arg-type]
        else:
            final = self.watch.final.timeline if self.watch.final is not None else None
            self.handle._finish(state, None if final is None else Timeline.from_dict(final))
        return True

    def _close(self) -> None:
        with contextlib.suppress(Exception):
            self.queue.close()
        if self.elastic is not None:
            self.elastic.close()
        self.tmp.cleanup()
