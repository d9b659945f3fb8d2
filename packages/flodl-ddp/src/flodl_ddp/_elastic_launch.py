"""Starting an elastic run, watching its ranks die and come back, and its handle.

The launching process hosts the torchft lighthouse (bound to the run's address, see
:mod:`flodl_ddp._elastic`), spawns one process per rank and watches them from a thread:

- a rank that dies (killed, out of memory) is logged and, while ``max_restarts`` allows,
  started again; the survivors carry on without it (see :mod:`flodl_ddp._elastic_rank`);
- the watchdog (:mod:`flodl_ddp._watchdog`) kills a rank hung inside a training step;
- fewer living ranks than ``min_ranks`` fail the run with :class:`DdpError`; so does a rank that
  raises (a bug in ``train_step`` is not a fault to survive: it would strike again);
- the first rank of the last window's quorum delivers the trained state.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import secrets
import signal
import tempfile
import threading
import time
from typing import Any

from ._elastic import ElasticOptions, resolve_exposure
from ._elastic_rank import ElasticPayload, RankSignals, elastic_rank_process
from ._errors import DdpError
from ._handle import DdpHandle
from ._launch import stop_processes
from ._watchdog import Watchdog
from ._worker import RankPayload, load_state

logger = logging.getLogger("flodl.ddp")

FINISH_GRACE_S = 5.0  # after the result: how long finished ranks get to exit by themselves


class ElasticHandle(DdpHandle):
    """A :class:`DdpHandle` for an elastic run, with the ranks' lifecycle exposed:
    :meth:`restart_rank`, :meth:`rank_pid`, :meth:`alive_ranks`, :attr:`events` (what happened,
    in order: ``died``, ``restarted``, ``watchdog``, ``healed``, ``rollback``) and
    :attr:`fingerprints` (each finishing rank's ``[Σθ, Σ|θ|, Σθ²]``)."""

    def __init__(self, world_size: int, devices: list[str], **kw: Any) -> None:
        super().__init__(world_size, devices, **kw)
        self._run: _ElasticRun | None = None
        self.events: list[dict[str, Any]] = []
        self.fingerprints: dict[int, list[float]] = {}

    def restart_rank(self, rank: int) -> None:
        """Start rank ``rank`` again (it must be dead); it heals from a living peer and joins
        at the next averaging boundary."""
        assert self._run is not None
        self._run.restart(rank)

    def rank_pid(self, rank: int) -> int | None:
        """The process id of rank ``rank``'s current process."""
        assert self._run is not None
        return self._run.procs[rank].pid

    def rank_phase(self, rank: int) -> int:
        """``0`` starting, ``1`` computing, ``2`` waiting for peers, ``3`` finished."""
        assert self._run is not None
        return int(self._run.signals.phase[rank])

    def rank_progress(self, rank: int) -> int:
        """Batches rank ``rank`` has trained (all its generations together)."""
        assert self._run is not None
        return int(self._run.signals.progress[rank])

    def alive_ranks(self) -> list[int]:
        """Ranks whose current process is running."""
        assert self._run is not None
        return [r for r, p in enumerate(self._run.procs) if p.exitcode is None]

    def all_pids(self) -> list[int]:
        """Every rank process started so far (for cleanup checks)."""
        assert self._run is not None
        return [p.pid for p in self._run.all_procs if p.pid is not None]


class _ElasticRun:
    def __init__(self, payload: RankPayload, opts: ElasticOptions, handle: ElasticHandle) -> None:
        import torch.multiprocessing as mp
        from torchft._torchft import LighthouseServer

        self.payload = payload
        self.opts = opts
        self.handle = handle
        self.world = len(payload.devices)
        exposure = resolve_exposure(opts)
        # The lighthouse waits this long for a rank that heartbeats but has not asked for the
        # quorum yet: a slow rank still finishing its window. A hung one is the watchdog's.
        join_ms = int(1000 * max(float(payload.cfg.timeout_s), opts.hang_timeout))
        self.lighthouse = LighthouseServer(
            bind=f"{exposure.host}:0",
            min_replicas=opts.min_ranks,
            join_timeout_ms=join_ms,
            heartbeat_timeout_ms=int(1000 * opts.heartbeat_timeout),
        )
        port = int(str(self.lighthouse.address()).rstrip("/").rsplit(":", 1)[-1])
        where = "loopback only" if not exposure.trusted else f"interface {exposure.gloo_ifname}"
        log = logger.warning if exposure.trusted else logger.info
        log(
            "elastic: torchft lighthouse on %s:%d (%s); rank managers, heal servers and gloo "
            "bind %s; heal transfers are flodl state files (no pickle) behind a per-run token; "
            "the quorum RPCs are unauthenticated: trusted networks only",
            exposure.host,
            port,
            where,
            exposure.host,
        )
        self.exposure = exposure
        self.elastic = ElasticPayload(
            base=payload,
            opts=opts,
            exposure=exposure,
            lighthouse=f"http://{exposure.host}:{port}",
            token=secrets.token_hex(16),
        )
        self.ctx = mp.get_context("spawn")
        self.q = self.ctx.Queue()
        self.signals = RankSignals(
            progress=self.ctx.Array("q", self.world, lock=False),
            phase=self.ctx.Array("b", self.world, lock=False),
            ready=self.ctx.Array("b", self.world, lock=False),
        )
        self.tmp = tempfile.TemporaryDirectory(prefix="flodl-elastic-")
        self.generation = [0] * self.world
        self.restarts = 0
        self.all_procs: list[Any] = []
        self.procs: list[Any] = []
        self.reported: set[tuple[int, int]] = set()  # (rank, generation) deaths handled
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.watchdog = Watchdog(
            self.signals.progress, self.signals.phase, opts.hang_timeout, self._watchdog_kill
        )
        try:
            self.procs = [self._start(r) for r in range(self.world)]
        except BaseException:
            self.teardown()
            raise

    # ---- processes -------------------------------------------------------------------------------

    def _start(self, rank: int) -> Any:
        p = self.ctx.Process(
            target=elastic_rank_process,
            args=(
                rank,
                self.elastic,
                self.signals,
                self.q,
                self.tmp.name,
                os.getpid(),
                self.generation[rank],
            ),
            name=f"flodl-ddp-elastic-rank{rank}",
            daemon=True,
        )
        p.start()
        self.all_procs.append(p)
        return p

    def restart(self, rank: int) -> None:
        with self._lock:
            if not 0 <= rank < self.world:
                raise DdpError(f"restart_rank: rank {rank} is not in 0..{self.world - 1}")
            old = self.procs[rank]
            if old.exitcode is None:
                raise DdpError(f"restart_rank: rank {rank} (pid {old.pid}) is still running")
            self.generation[rank] += 1
            self.signals.phase[rank] = 0
            self.watchdog.reset(rank)
            self.procs[rank] = self._start(rank)
            self._event("restarted", rank, generation=self.generation[rank])
            logger.info(
                "elastic: rank %d restarted (generation %d, pid %d)",
                rank,
                self.generation[rank],
                self.procs[rank].pid,
            )

    def _watchdog_kill(self, rank: int, stalled: float) -> None:
        p = self.procs[rank]
        logger.warning(
            "elastic: rank %d (pid %s) finished no batch for %.1f s while computing "
            "(hang_timeout %.1f s): killed",
            rank,
            p.pid,
            stalled,
            self.opts.hang_timeout,
        )
        self._event("watchdog", rank, stalled_s=stalled)
        with contextlib.suppress(Exception):
            os.kill(p.pid, signal.SIGKILL)
            os.kill(p.pid, signal.SIGCONT)  # a stopped process dies only once it runs again

    def teardown(self) -> None:
        stop_processes(self.all_procs)

    def _event(self, kind: str, rank: int, **fields: Any) -> None:
        self.handle.events.append({"event": kind, "rank": rank, "t": time.time(), **fields})

    def stop(self) -> None:
        self._stopping.set()

    # ---- the watcher -----------------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:
            self.teardown()
            self.handle._fail(DdpError(f"the elastic watcher failed: {type(e).__name__}: {e}"))
        finally:
            with contextlib.suppress(Exception):
                self.q.close()
            with contextlib.suppress(Exception):
                self.lighthouse.shutdown()
            self.tmp.cleanup()

    def _handle_msg(self, msg: tuple[Any, ...], state: dict[str, Any]) -> None:
        kind = msg[0]
        if kind == "metrics":
            m = msg[1]
            if m.epoch > state["last_epoch"] and state["final"] is None:
                state["last_epoch"] = m.epoch
                self.handle._push_metrics(m)
        elif kind == "final":
            state["final"] = state["final"] or msg[1]
        elif kind == "done":
            state["done"].add(msg[1])
        elif kind == "error":
            state["errors"].append(msg[1:])
        elif kind == "fingerprint":
            self.handle.fingerprints[msg[1]] = list(msg[3])
        elif kind == "listen":
            rank, gen, ports = msg[1], msg[2], msg[3]
            log = logger.warning if self.exposure.trusted else logger.info
            log(
                "elastic: rank %d (generation %d) listens on %s: manager port %d, heal server "
                "port %d (token-checked), rendezvous store port %d",
                rank,
                gen,
                self.exposure.host,
                ports["manager"],
                ports["heal"],
                ports["store"],
            )
        elif kind == "healed":
            self._event("healed", msg[1], epoch=msg[2], cursor=msg[3])
        elif kind == "rollback":
            self._event("rollback", msg[1], epoch=msg[2], participants=msg[3])

    def _run(self) -> None:
        state: dict[str, Any] = {"final": None, "done": set(), "errors": [], "last_epoch": -1}
        final_at: float | None = None
        while True:
            try:
                msg = self.q.get(timeout=0.05)
            except queue.Empty:
                msg = None
            if msg is not None:
                self._handle_msg(msg, state)
                continue
            if self._stopping.is_set():
                self.teardown()
                self.handle._fail(DdpError("the run was stopped by DdpHandle.stop()"))
                return
            if state["errors"]:
                rank, host, text, tb = state["errors"][0]
                self.teardown()
                self.handle._fail(
                    DdpError(
                        f"rank {rank} failed: {text}", rank=rank, host=host, remote_traceback=tb
                    )
                )
                return
            with self._lock:
                self.watchdog.check(lambda r: self.procs[r].exitcode is None)
                self._deaths(state)
                alive = [r for r, p in enumerate(self.procs) if p.exitcode is None]
            if state["final"] is not None:
                final_at = final_at or time.monotonic()
                if not alive or time.monotonic() - final_at >= FINISH_GRACE_S:
                    self.teardown()  # a late joiner after the end has nothing left to train
                    self.handle._finish(load_state(state["final"]))
                    return
                continue
            if len(alive) < self.opts.min_ranks:
                self.teardown()
                dead = [r for r in range(self.world) if r not in alive]
                self.handle._fail(
                    DdpError(
                        f"elastic run has {len(alive)} living rank(s) (ranks {dead} died), fewer "
                        f"than min_ranks={self.opts.min_ranks}; restart ranks sooner, allow "
                        "more with max_restarts, or lower min_ranks"
                    )
                )
                return

    def _deaths(self, state: dict[str, Any]) -> None:
        for r, p in enumerate(self.procs):
            key = (r, self.generation[r])
            if p.exitcode is None or key in self.reported:
                continue
            self.reported.add(key)
            if p.exitcode == 0 and r in state["done"]:
                continue
            if self.signals.ready[r] == 0:
                self.signals.ready[r] = -1  # peers waiting for the first quorum stop waiting
            code = p.exitcode
            how = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
            logger.warning("elastic: rank %d (pid %s) %s; the others continue", r, p.pid, how)
            self._event("died", r, code=code)
            if self.restarts < self.opts.max_restarts and state["final"] is None:
                self.restarts += 1
                self.generation[r] += 1
                self.signals.phase[r] = 0
                self.watchdog.reset(r)
                self.procs[r] = self._start(r)
                self._event("restarted", r, generation=self.generation[r])


def launch_elastic(
    payload: RankPayload, opts: ElasticOptions, metrics_fn: Any, monitor: Any
) -> ElasticHandle:
    """Start an elastic run (spawned ranks on this machine); returns its handle."""
    holder: dict[str, _ElasticRun] = {}
    handle = ElasticHandle(
        len(payload.devices),
        payload.devices,
        metrics_fn=metrics_fn,
        monitor=monitor,
        stop=lambda: holder["r"].stop(),
    )
    run = _ElasticRun(payload, opts, handle)
    holder["r"] = run
    handle._run = run
    threading.Thread(target=run.run, name="flodl-ddp-elastic-watcher", daemon=True).start()
    return handle


# Options the elastic engine does not implement, with the value that means "not asked for".
_UNSUPPORTED = {
    "bf16_wire": False,
    "max_batch_diff": None,
    "speed_hint": None,
    "partition_ratios": None,
    "max_overshoot": None,
    "guard": None,
    "meta_controller": False,
    "easgd_alpha": None,
    "scheduler": None,
    "timeline": False,
    "slowdown": None,
    "checkpoint_every": None,
    "resume": None,
}


def start_elastic(payload: RankPayload, metrics_fn: Any, monitor: Any) -> ElasticHandle:
    """Validate an elastic run's options, then :func:`launch_elastic` it.

    Raises:
        ConfigError: an option elastic mode does not implement, a mode other than
            ``cpu-cadence``, a launch under torchrun, or an exposure rule (see
            :func:`~flodl_ddp._elastic.resolve_exposure`).
    """
    from flodl_core import ConfigError

    from ._elastic import check_elastic, require_torchft, resolve_exposure
    from ._launch import check_picklable, torchrun_env

    cfg = payload.cfg
    opts = cfg.elastic  # type: ignore[attr-defined]
    world = len(payload.devices)
    check_elastic(opts, world)
    if payload.mode.name != "cpu-cadence":
        raise ConfigError(
            f"elastic training averages every `anchor` batches over gloo, i.e. mode "
            f"'cpu-cadence'; the mode is {payload.mode.name!r}: use .mode('cpu-cadence')"
        )
    for name, off in _UNSUPPORTED.items():
        value = getattr(cfg, name)
        if value != off and not (name == "slowdown" and not value):
            raise ConfigError(
                f"{name}={value!r} is not supported in elastic mode (ranks come and go, so "
                f"per-rank plans and checkpoints of a fixed world do not apply); drop {name}"
            )
    if torchrun_env() is not None:
        raise ConfigError(
            "elastic training starts its own rank processes and cannot run under torchrun; "
            "run the script with plain python, or use torchrun --max-restarts with "
            "checkpoint_every(...) and .resume(...) instead"
        )
    resolve_exposure(opts)  # refuse an exposed setup before anything starts
    require_torchft()
    for name in ("model_factory", "optim_factory", "train_step"):
        check_picklable(name, getattr(payload, name))
    for name in ("eval_fn", "outer_optimizer"):
        check_picklable(name, getattr(cfg, name))
    return launch_elastic(payload, opts, metrics_fn, monitor)
