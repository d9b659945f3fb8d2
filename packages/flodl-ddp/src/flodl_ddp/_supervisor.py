"""Watching the rank processes of a spawned run: one supervisor for static and elastic runs.

The supervisor starts one process per rank (spawn context, so the launcher never initialises
CUDA), reads their typed messages (:mod:`flodl_ddp._messages`) from one queue, polls their exit
codes and runs the :class:`~flodl_ddp._watchdog.Watchdog` over their beacons. What a failure
means depends on the run:

- **static** (:class:`StaticPolicy`): the run fails. After the first sign of trouble the
  supervisor waits :data:`ERROR_GRACE_S` for the root cause, tears every rank down (SIGTERM,
  then SIGKILL) and fails the handle with one error that names the rank at fault: a death by a
  signal first (it causes the connection errors its peers then report), then a rank the
  watchdog found stopped or hung, then a rank's own exception, then its peers' echoes of it,
  then a silent exit (with the fix when it is the missing ``if __name__ == "__main__":``).
- **elastic** (:class:`ElasticPolicy`): a death is logged and, while ``max_restarts`` allows,
  the rank is started again; the watchdog's verdicts kill the rank, which makes them deaths.
  Fewer living ranks than ``min_ranks`` fail the run, and so does a rank that raises (a bug in
  ``train_step`` is not a fault to survive: it would strike again).

The run's temporary folder (it holds the trained weights) is removed before the handle
resolves. A rank that delivered its result and then dies in teardown is not a failure.
"""

from __future__ import annotations

import contextlib
import logging
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

from ._errors import DdpError
from ._handle import DdpHandle
from ._messages import (
    Counts,
    Done,
    Epoch,
    Failed,
    Final,
    Healed,
    Listening,
    Report,
    RolledBack,
)
from ._timeline import Timeline
from ._watchdog import Watchdog, process_stopped
from ._worker import load_state

logger = logging.getLogger("flodl.ddp")

ERROR_GRACE_S = 1.0  # after a first failure, wait this long for the root cause to arrive
TERM_GRACE_S = 3.0  # SIGTERM, then SIGKILL after this long
FINISH_GRACE_S = 5.0  # elastic: after the result, how long finished ranks get to exit
MAIN_GUARD_EXIT = 97
"""Exit code of a rank process that found the launching script re-running at its top level."""
MAIN_GUARD = (
    'the script that started the run has no `if __name__ == "__main__":` guard, so each rank '
    "process ran it again from the top; put the code that builds and runs the Trainer under "
    "that guard"
)


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
    """The run's one error (module doc, static runs)."""
    for r, code in sorted(w.deaths.items()):
        if code < 0:
            return DdpError(f"rank {r} {how_it_died(code)}", rank=r, host=host)
    for r, why in w.verdicts:
        return DdpError(
            f"rank {r} {why}; the other ranks cannot go on without it", rank=r, host=host
        )
    causes = [e for e in w.errors if not e.echo] or w.errors
    if causes:
        e = causes[0]
        return DdpError(
            f"rank {e.rank} failed: {e.text}",
            rank=e.rank,
            host=e.host,
            remote_traceback=e.traceback,
        )
    r, code = min(w.deaths.items())
    return DdpError(f"rank {r} {how_it_died(code)}", rank=r, host=host)


class Supervisor:
    """Starts, watches and tears down the rank processes of one run (module doc).

    Args:
        handle: what the user holds; fed from the supervisor's thread.
        world: the number of ranks.
        target: ``target(rank, generation) -> (function, args)`` of a rank process.
        watchdog: ``watchdog(kill) -> Watchdog`` over the ranks' beacons.
        elastic: the elastic policy, ``None`` for a static run.
    """

    def __init__(
        self,
        handle: DdpHandle,
        world: int,
        ctx: Any,
        target: Callable[[int, int], tuple[Callable[..., None], tuple[Any, ...]]],
        watchdog: Callable[[Callable[[int, str, float], None]], Watchdog],
        elastic: Any = None,
    ) -> None:
        self.handle, self.world, self.ctx, self.target = handle, world, ctx, target
        self.elastic = elastic
        self.queue = ctx.Queue()
        self.tmp = tempfile.TemporaryDirectory(prefix="flodl-ddp-")
        self.generation = [0] * world
        self.restarts = 0
        self.all_procs: list[Any] = []
        self.procs: list[Any] = []
        self.watch = Watch()
        self.watchdog = watchdog(self._judged)
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._reported: set[tuple[int, int]] = set()  # (rank, generation) deaths handled

    def start(self) -> None:
        """Start every rank and the watching thread."""
        try:
            self.procs = [self._spawn(r) for r in range(self.world)]
        except BaseException:
            self._close()
            raise
        threading.Thread(target=self.run, name="flodl-ddp-supervisor", daemon=True).start()

    def _spawn(self, rank: int) -> Any:
        fn, args = self.target(rank, self.generation[rank])
        p = self.ctx.Process(target=fn, args=args, name=f"flodl-ddp-rank{rank}", daemon=True)
        try:
            p.start()
        except RuntimeError as e:
            if "bootstrapping phase" in str(e):  # this is a rank re-running the user's script
                print(f"flodl-ddp: {MAIN_GUARD}", file=sys.stderr, flush=True)
                os._exit(MAIN_GUARD_EXIT)
            raise
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
        self.procs[rank] = self._spawn(rank)
        self._event("restarted", rank, generation=self.generation[rank])
        logger.info(
            "elastic: rank %d restarted (generation %d, pid %d)",
            rank,
            self.generation[rank],
            self.procs[rank].pid,
        )

    def stop(self) -> None:
        self._stopping.set()

    def _event(self, kind: str, rank: int, **fields: Any) -> None:
        self.handle.events.append({"event": kind, "rank": rank, "t": time.time(), **fields})

    # ---- the watching thread ---------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self._step():
                pass
        except BaseException as e:  # the supervisor itself must never leave ranks behind
            self._resolve(DdpError(f"the run's supervisor failed: {type(e).__name__}: {e}"))

    def _step(self) -> bool:
        """Take one message, or look at the processes; ``True`` once the run is resolved."""
        try:
            msg = self.queue.get(timeout=0.05)
        except queue.Empty:
            msg = None
        if msg is not None:
            self._take(msg)
            return False  # drain the queue before looking at exit codes
        if self._stopping.is_set():
            return self._resolve(DdpError("the run was stopped by DdpHandle.stop()"))
        with self._lock:
            procs = self.procs
            self.watchdog.check(
                lambda r: procs[r].exitcode is None, lambda r: process_stopped(procs[r].pid)
            )
            self._deaths()
        policy = self.elastic or STATIC
        outcome = policy.outcome(self)
        return outcome is not None and self._resolve(outcome)

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
            logger.info(
                "elastic: rank %d (generation %d) listens on %s",
                msg.rank,
                msg.generation,
                msg.ports,
            )
        elif isinstance(msg, Healed):
            self._event("healed", msg.rank, epoch=msg.epoch, cursor=msg.cursor)
        elif isinstance(msg, Counts):
            self._event("counts", msg.rank, window=msg.window, counts=msg.counts)
        elif isinstance(msg, RolledBack):
            self._event("rollback", msg.rank, epoch=msg.epoch, participants=msg.participants)

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
        """Tear down, remove the temporary folder, then resolve the handle."""
        with contextlib.suppress(Exception):
            stop_processes(self.all_procs)
        state = None
        if isinstance(outcome, str):
            try:
                state = load_state(outcome)
            except Exception as e:
                outcome = DdpError(f"the trained state could not be read back: {e}")
        self._close()
        if state is not None:
            timeline = self.watch.final.timeline if self.watch.final is not None else None
            self.handle._finish(state, _timeline(timeline))
        else:
            self.handle._fail(outcome)  # type: ignore[arg-type]
        return True

    def _close(self) -> None:
        with contextlib.suppress(Exception):
            self.queue.close()
        if self.elastic is not None:
            self.elastic.close()
        self.tmp.cleanup()


def _timeline(data: dict[str, Any] | None) -> Any:
    return None if data is None else Timeline.from_dict(data)


class StaticPolicy:
    """A fixed world: any failure fails the run (module doc)."""

    def outcome(self, s: Supervisor) -> DdpError | str | None:
        w = s.watch
        exited = all(p.exitcode is not None for p in s.procs)
        if w.first_fail is not None and (
            time.monotonic() - w.first_fail >= ERROR_GRACE_S or exited
        ):
            return blame(w, socket.gethostname())
        if len(w.done) == s.world and w.final is not None:
            for p in s.procs:
                p.join(10.0)  # anything still there after delivering is only teardown
            return w.final.path
        if exited and len(w.done) < s.world:
            missing = [r for r in range(s.world) if r not in w.done]
            return DdpError(f"ranks {missing} exited without delivering their results")
        return None


STATIC = StaticPolicy()
