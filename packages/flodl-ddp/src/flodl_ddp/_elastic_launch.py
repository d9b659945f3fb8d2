"""Starting an elastic run: the torchft lighthouse (bound to the run's address), the supervisor
under :class:`ElasticPolicy`, the :class:`ElasticHandle`.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from typing import Any

import torch.multiprocessing as mp

from flodl_core import ConfigError

from ._elastic import ElasticOptions, Exposure, check_elastic, require_torchft, resolve_exposure
from ._elastic_link import ElasticLink, elastic_rank_process
from ._errors import DdpError
from ._handle import DdpHandle
from ._supervisor import FINISH_GRACE_S, Supervisor, blame, how_it_died
from ._torchrun import torchrun_env
from ._worker import RankPayload, spawn_picklable

logger = logging.getLogger("flodl.ddp")


class ElasticHandle(DdpHandle):
    """A :class:`DdpHandle` for an elastic run, with the ranks' lifecycle exposed:
    :meth:`restart_rank`, :meth:`rank_pid`, :meth:`alive_ranks`, :attr:`events` (what happened,
    in order: ``died``, ``restarted``, ``watchdog``, ``healed``, ``rollback``, and ``counts``:
    each committed window's ElChe counts for the next, from its leader) and
    :attr:`fingerprints` (each finishing rank's ``[Σθ, Σ|θ|, Σθ²]``)."""

    def restart_rank(self, rank: int) -> None:
        """Restart dead rank ``rank``: it heals from a living peer and joins at the next round."""
        self._supervisor.restart(rank)

    def rank_phase(self, rank: int) -> int:
        """``0`` starting, ``1`` computing, ``2`` waiting for peers, ``3`` finished."""
        return int(self._supervisor.watchdog.phase[rank])

    def rank_progress(self, rank: int) -> int:
        """Batches rank ``rank`` has trained (all its generations together)."""
        return int(self._supervisor.watchdog.progress[rank])


class ElasticPolicy:
    """A dead rank is logged and restarted while ``max_restarts`` allows and the survivors carry
    on; fewer living ranks than ``min_ranks`` fail the run, and so does a rank that raises (a bug
    in ``train_step`` would strike again), unless its error is the echo of a fault elsewhere (a
    peer's death, torchft's quorum timing out): then it died. ``ready``: first-generation flags."""

    def __init__(self, opts: ElasticOptions, lighthouse: Any, ready: Any) -> None:
        self.opts, self.lighthouse, self.ready = opts, lighthouse, ready

    def reset(self, rank: int) -> None:
        self.ready[rank] = 0

    def died(self, sup: Supervisor, rank: int, proc: Any) -> None:
        if self.ready[rank] == 0:
            self.ready[rank] = -1  # peers waiting for the first quorum stop waiting
        how = how_it_died(proc.exitcode)
        logger.warning("elastic: rank %d (pid %s) %s; the others continue", rank, proc.pid, how)
        sup._event("died", rank, code=proc.exitcode)
        if sup.restarts < self.opts.max_restarts and sup.watch.final is None:
            sup.restarts += 1
            sup._respawn(rank)

    def outcome(self, sup: Supervisor) -> DdpError | str | None:
        w = sup.watch
        if any(not e.echo for e in w.errors):  # a bug; an echo (a peer, torchft) is a death
            return blame(w, "")
        alive = [r for r, p in enumerate(sup.procs) if p.exitcode is None]
        if w.final is not None:  # the rank that led the last window delivered
            w.final_at = w.final_at or time.monotonic()
            if not alive or time.monotonic() - w.final_at >= FINISH_GRACE_S:
                return w.final.path  # a late joiner after the end has nothing left to train
            return None
        if len(alive) < self.opts.min_ranks:
            dead = [r for r in range(sup.world) if r not in alive]
            first = f"; first: {blame(w, '').message}" if w.deaths or w.verdicts or w.errors else ""
            return DdpError(
                f"elastic run has {len(alive)} living rank(s) (ranks {dead} died{first}), fewer "
                f"than min_ranks={self.opts.min_ranks}; restart ranks sooner, allow more with "
                "max_restarts, or lower min_ranks"
            )
        return None

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the lighthouse goes with the run either way
            self.lighthouse.shutdown()


# Options the elastic engine does not implement, with the value that means "not asked for".
_UNSUPPORTED = dict(bf16_wire=False, max_batch_diff=None, max_overshoot=None, easgd_alpha=None)
_UNSUPPORTED |= dict(timeline=False, checkpoint_every=None, resume=None)


def check_elastic_run(payload: RankPayload) -> ElasticOptions:
    """Refuse what an elastic run cannot do, before anything starts."""
    spec = payload.spec
    opts: ElasticOptions = spec.elastic
    check_elastic(opts, len(payload.devices))
    if spec.mode.name != "cpu-cadence":
        raise ConfigError(
            f"elastic training averages every window over gloo, i.e. mode 'cpu-cadence'; the "
            f"mode is {spec.mode.name!r}: use .mode('cpu-cadence')"
        )
    for name, off in _UNSUPPORTED.items():
        if (value := getattr(spec, name)) != off:
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
    spawn_picklable(payload)
    return opts


def _lighthouse(opts: ElasticOptions, exposure: Exposure, timeout: float) -> tuple[Any, int]:
    """The run's torchft lighthouse, bound where the exposure says, and its port."""
    require_torchft()
    from torchft.coordination import LighthouseServer

    lighthouse = LighthouseServer(
        bind=f"{exposure.host}:0",
        min_replicas=opts.min_ranks,
        # The lighthouse waits this long for a rank that heartbeats but has not asked for the
        # quorum yet: a slow rank still finishing its window. A hung one is the watchdog's.
        join_timeout_ms=int(1000 * max(float(timeout), opts.hang_timeout)),
        heartbeat_timeout_ms=int(1000 * opts.heartbeat_timeout),
    )
    port, host = int(str(lighthouse.address()).rstrip("/").rsplit(":", 1)[-1]), exposure.host
    note = (
        "elastic: torchft lighthouse on %s:%d; rank managers, heal servers and gloo bind %s; heal "
        "transfers are flodl state files (no pickle) behind a per-run token; the quorum RPCs "
        "are unauthenticated: trusted networks only"
    )
    (logger.warning if exposure.trusted else logger.info)(note, host, port, host)
    return lighthouse, port


def launch_elastic(payload: RankPayload, watchers: dict[str, Any]) -> ElasticHandle:
    """Start an elastic run (spawned ranks on this machine); returns its handle."""
    opts = check_elastic_run(payload)
    exposure = resolve_exposure(opts)  # refuse an exposed setup before anything starts
    world, timeout = len(payload.devices), payload.spec.timeout_s
    lighthouse, port = _lighthouse(opts, exposure, timeout)
    ready = mp.get_context("spawn").Array("b", world, lock=False)
    url, token = f"http://{exposure.host}:{port}", secrets.token_hex(16)
    el = ElasticLink(exposure.host, exposure.gloo_ifname, url, token, opts.min_ranks, ready)
    handle = ElasticHandle(world, payload.devices, **watchers)
    # A stopped rank, or one computing without a batch, is dead after hang_timeout; one
    # waiting without a change past the run's timeout too (torchft bounds those waits).
    hang = opts.hang_timeout
    limits = (hang, hang, max(hang, timeout) + hang)
    policy = ElasticPolicy(opts, lighthouse, ready)
    sup = Supervisor(handle, payload, elastic_rank_process, limits, policy, elastic=el)
    handle._attach(sup)
    sup.start()
    return handle
