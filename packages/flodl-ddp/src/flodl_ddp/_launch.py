"""Starting the ranks, watching them, tearing them down.

Three ways a run starts (:func:`launch`):

- **spawned** (a plain process, several devices): the launching process hosts the rendezvous
  ``TCPStore`` on a free loopback port and starts one process per rank with
  ``torch.multiprocessing`` (spawn context, so the parent never initialises CUDA). A watcher
  thread receives epochs, the result and failures through a queue. When a rank fails, every other
  rank is terminated (SIGTERM, then SIGKILL) and ``join()`` raises :class:`DdpError` with the
  failing rank's host and traceback. A rank that delivered its result and then dies in
  process-group teardown is not a failure.
- **under torchrun** (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``LOCAL_RANK`` set): this process
  *is* one rank; it joins the process group from the environment and trains on a background
  thread. torchrun tears the other ranks down when one exits with an error.
- **world size 1**: trains on a background thread of the calling process, with the same handle,
  metrics and result.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import os
import pickle
import queue
import signal
import socket
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from flodl_core import ConfigError, detect_gpus, resolve_device

from ._comm import Comm, SoloComm
from ._errors import DdpError
from ._handle import DdpHandle
from ._modes import Mode
from ._rank import RankContext
from ._store import listen_store
from ._worker import RankPayload, load_state, rank_process, set_threads, train_rank

logger = logging.getLogger("flodl.ddp")

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK")
ERROR_GRACE_S = 1.0  # after a first failure, wait this long for the root cause to arrive
TERM_GRACE_S = 3.0  # SIGTERM, then SIGKILL after this long
_RUNS = itertools.count()


# ---- before anything starts ---------------------------------------------------------------------


def default_devices() -> list[str]:
    """Every GPU :func:`flodl_core.detect_gpus` sees (without initialising CUDA), else one CPU."""
    gpus = detect_gpus()
    return [f"cuda:{i}" for i in range(len(gpus))] if gpus else ["cpu"]


def normalise_devices(devices: Any) -> list[str]:
    if devices is None:
        return default_devices()
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise ConfigError(f"devices must be a list (one entry per rank), got {devices!r}")
    out = [str(resolve_device(d)) for d in devices]
    if not out:
        raise ConfigError("devices is empty; give at least one device (e.g. ['cpu'])")
    return out


def check_cuda_devices(devices: list[str]) -> None:
    """Refuse CUDA devices this machine cannot give, before any rank starts (a rank would
    otherwise fail deep inside torch). Reads torch's build and :func:`flodl_core.detect_gpus`:
    nothing here initialises CUDA. Without a GPU listing (no ``nvidia-smi``) the count is
    unknown and only the build is checked."""
    cuda = [d for d in devices if d.startswith("cuda")]
    if not cuda:
        return
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        raise ConfigError(
            f"devices {devices} name {cuda[0]}, but this torch ({torch.__version__}) is built "
            "without CUDA; install a CUDA build of torch, or train on 'cpu' devices"
        )
    gpus = detect_gpus()
    if not gpus:
        return
    for d in cuda:
        index = torch.device(d).index or 0
        if index >= len(gpus):
            seen = ", ".join(f"cuda:{i}" for i in range(len(gpus)))
            raise ConfigError(
                f"devices {devices} name {d}, but this machine shows {len(gpus)} GPU"
                f"{'s' if len(gpus) > 1 else ''} ({seen}); CUDA_VISIBLE_DEVICES narrows that list"
            )


def torchrun_env() -> dict[str, int | str] | None:
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` when running under torchrun."""
    if not all(v in os.environ for v in TORCHRUN_VARS):
        return None
    return {
        "rank": int(os.environ["RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "master_addr": os.environ["MASTER_ADDR"],
    }


def local_world(devices: list[str], listed: bool) -> int:
    """Ranks on this host under torchrun: ``LOCAL_WORLD_SIZE``, else the ``devices`` the run
    lists for this node (``listed``), else one."""
    if "LOCAL_WORLD_SIZE" in os.environ:
        return int(os.environ["LOCAL_WORLD_SIZE"])
    return len(devices) if listed else 1


def check_picklable(name: str, obj: Any) -> None:
    """Spawned ranks receive the factories by pickling: refuse lambdas and local functions."""
    if obj is None:
        return
    try:
        pickle.dumps(obj)
    except Exception as e:
        what = getattr(obj, "__qualname__", type(obj).__name__)
        raise ConfigError(
            f"{name} {what!r} cannot be sent to the rank processes ({type(e).__name__}: {e}); "
            "pass a function defined at the top level of an importable module (not a lambda, "
            "not a function defined inside another function), or a picklable object"
        ) from None


def summary_line(devices: list[str], mode: Mode, world: int | None = None,
                 slowdown: Mapping[int, float] | None = None) -> str:  # fmt: skip
    """``ddp: 2 ranks (heterogeneous) | NVIDIA A | NVIDIA B | mode nccl-cadence``.

    Under torchrun (``world`` given) a process only knows its own node's devices:
    ``ddp: 4 ranks under torchrun | this node: NVIDIA A | NVIDIA B | nccl-cadence``. A
    ``slowdown`` (the testing aid) is named, so a log never passes equal devices off as
    different ones: ``ddp: 2 ranks (homogeneous, rank 1 slowed 2x) | cpu | cpu | cpu-async``."""
    gpus = (
        {f"cuda:{i}": g for i, g in enumerate(detect_gpus())}
        if any(d.startswith("cuda") for d in devices)
        else {}
    )
    names = []
    for d in devices:
        g = gpus.get(d if ":" in d else f"{d}:0")
        if g is None:
            names.append(d)
        else:
            mem = f" ({g.total_memory / 2**30:.1f} GB)" if g.total_memory else ""
            names.append(f"{g.name}{mem}")
    slowed = "".join(
        f", rank {r} slowed {f:g}x" for r, f in sorted((slowdown or {}).items()) if f != 1.0
    )
    if world is not None:
        return (
            f"  ddp: {world} rank{'s' if world != 1 else ''} under torchrun{slowed} | this node: "
            f"{' | '.join(names)} | {mode.name}"
        )
    kind = ("heterogeneous" if len(set(names)) > 1 else "homogeneous") + slowed
    n = len(devices)
    return f"  ddp: {n} rank{'s' if n != 1 else ''} ({kind}) | {' | '.join(names)} | {mode.name}"


# ---- the three launches --------------------------------------------------------------------------


def launch(payload: RankPayload, metrics_fn: Any, monitor: Any) -> DdpHandle:
    """Start the run as the environment says (module docstring); returns its handle."""
    env = torchrun_env()
    if env is not None:
        return _launch_torchrun(payload, env, metrics_fn, monitor)
    world = len(payload.devices)
    if world == 1:
        return _launch_local(payload, metrics_fn, monitor)
    return _launch_spawn(payload, metrics_fn, monitor)


def _local_payload(payload: RankPayload) -> RankPayload:
    # In-process ranks must not mutate the caller's guard / outer optimizer objects.
    cfg = replace(
        payload.cfg,
        guard=copy.deepcopy(payload.cfg.guard),
        outer_optimizer=copy.deepcopy(payload.cfg.outer_optimizer),
    )
    return replace(payload, cfg=cfg)


def _launch_local(payload: RankPayload, metrics_fn: Any, monitor: Any) -> DdpHandle:
    payload = _local_payload(payload)
    handle = DdpHandle(1, payload.devices, metrics_fn=metrics_fn, monitor=monitor)
    host = socket.gethostname()
    device = torch.device(payload.devices[0])

    def body() -> None:
        try:
            if payload.cfg.threads_per_rank is not None:
                # only when asked: this is the caller's process (the count is per thread)
                torch.set_num_threads(payload.cfg.threads_per_rank)
            ctx = RankContext(0, 1, device, host, SoloComm(), time.time())
            state, timeline = train_rank(payload, ctx, handle._push_metrics)
            handle._finish(state, timeline)
        except BaseException as e:
            handle._fail(_local_error(e, 0, host))

    threading.Thread(target=body, name="flodl-ddp-rank0", daemon=True).start()
    return handle


def _local_error(e: BaseException, rank: int, host: str) -> DdpError:
    if isinstance(e, DdpError) and e.rank is not None:
        return e
    err = DdpError(
        f"rank {rank} failed: {type(e).__name__}: {e}",
        rank=rank,
        host=host,
        remote_traceback="".join(traceback.format_exception(type(e), e, e.__traceback__)),
    )
    err.__cause__ = e
    return err


def _launch_torchrun(
    payload: RankPayload, env: dict[str, Any], metrics_fn: Any, monitor: Any
) -> DdpHandle:
    payload = _local_payload(payload)
    rank, world, local = int(env["rank"]), int(env["world_size"]), int(env["local_rank"])
    if payload.cfg.devices is not None:
        device = torch.device(payload.devices[local % len(payload.devices)])
    else:
        device = torch.device(f"cuda:{local}" if detect_gpus() else "cpu")
    host = socket.gethostname()
    handle = DdpHandle(
        world,
        [str(device)],
        metrics_fn=metrics_fn if rank == 0 else None,
        monitor=monitor if rank == 0 else None,
    )

    def body() -> None:
        created = False
        try:
            set_threads(
                payload.cfg,
                device,
                local,
                local_world(payload.devices, payload.cfg.devices is not None),
            )
            timeout = timedelta(seconds=payload.cfg.timeout_s)
            if not dist.is_initialized():
                backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
                from ._elastic_fallback import init_torchrun_group

                init_torchrun_group(backend, timeout)  # restart-safe (torchrun --max-restarts)
                created = True
            from torch.distributed.distributed_c10d import _get_default_store

            # Every rank calls run() the same number of times: the count names this run's keys,
            # so a second run in the same process group never reads the first one's messages.
            prefix = f"flodl-ddp/run{next(_RUNS)}"
            comm = Comm(dist.PrefixStore(prefix, _get_default_store()), rank, world)
            ctx = RankContext(rank, world, device, host, comm, time.time())
            try:
                state, timeline = train_rank(payload, ctx, handle._push_metrics)
                comm.barrier("fin")
            finally:
                comm.close()
            outcome: tuple[Any, Any] | BaseException = (state, timeline)
        except BaseException as e:
            outcome = _local_error(e, rank, host)
        # The group goes before join() returns: a script that exits right after join() must
        # not race gloo's teardown in this thread.
        if created:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        if isinstance(outcome, BaseException):
            handle._fail(outcome)  # type: ignore[arg-type]
        else:
            handle._finish(*outcome)

    threading.Thread(target=body, name=f"flodl-ddp-rank{rank}", daemon=True).start()
    return handle


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


@dataclass
class _WatchState:
    """What the watcher has heard from the ranks so far."""

    done: set[int] = field(default_factory=set)
    final: tuple[str, Any] | None = None
    errors: list[tuple[Any, ...]] = field(default_factory=list)
    deaths: dict[int, int] = field(default_factory=dict)
    first_fail: float | None = None


class _Spawned:
    """The watcher of spawned rank processes (runs on its own thread)."""

    def __init__(self, payload: RankPayload, handle: DdpHandle) -> None:
        import torch.multiprocessing as mp

        self.world = len(payload.devices)
        self.handle = handle
        # loopback only: the store carries the ranks' control messages and checkpoint state
        self.store = listen_store("127.0.0.1", 0, timeout_s=payload.cfg.timeout_s)
        ctx = mp.get_context("spawn")
        self.q = ctx.Queue()
        self.tmp = tempfile.TemporaryDirectory(prefix="flodl-ddp-")
        t0 = time.time()
        self.procs = [
            ctx.Process(
                target=rank_process,
                args=(
                    r,
                    self.world,
                    self.store.port,
                    payload,
                    self.q,
                    self.tmp.name,
                    t0,
                    os.getpid(),
                ),
                name=f"flodl-ddp-rank{r}",
                daemon=True,
            )
            for r in range(self.world)
        ]
        self._stopping = threading.Event()
        try:
            for p in self.procs:
                p.start()
        except BaseException:
            self.teardown()
            self.tmp.cleanup()
            raise

    def teardown(self) -> None:
        stop_processes(self.procs)

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # the watcher itself must never leave ranks behind
            self.teardown()
            self.handle._fail(DdpError(f"the run's watcher failed: {type(e).__name__}: {e}"))
        finally:
            with contextlib.suppress(Exception):
                self.q.close()
            self.tmp.cleanup()

    def _run(self) -> None:
        st = _WatchState()
        while True:
            try:
                msg = self.q.get(timeout=0.1)
            except queue.Empty:
                msg = None
            if msg is not None:
                self._take(msg, st)
                continue  # drain the queue before looking at exit codes
            for r, p in enumerate(self.procs):
                failed = p.exitcode is not None and p.exitcode != 0
                if failed and r not in st.done and r not in st.deaths:
                    st.deaths[r] = p.exitcode
                    st.first_fail = st.first_fail or time.monotonic()
            if self._settled(st):
                return

    def _take(self, msg: tuple[Any, ...], st: _WatchState) -> None:
        """One message from a rank: metrics go to the handle, the rest into ``st``."""
        kind = msg[0]
        if kind == "metrics":
            self.handle._push_metrics(msg[1])
        elif kind == "final":
            st.final = (msg[1], msg[2])
        elif kind == "done":
            st.done.add(msg[1])
        elif kind == "error":
            st.errors.append(msg[1:])
            st.first_fail = st.first_fail or time.monotonic()

    def _settled(self, st: _WatchState) -> bool:
        """Deliver the run's outcome if there is one yet (stopped, failed, finished, or ranks
        gone without results); ``True`` once delivered."""
        everyone_exited = all(p.exitcode is not None for p in self.procs)
        if self._stopping.is_set():
            self.teardown()
            self.handle._fail(DdpError("the run was stopped by DdpHandle.stop()"))
        elif st.first_fail is not None and (
            time.monotonic() - st.first_fail >= ERROR_GRACE_S or everyone_exited
        ):
            self.teardown()
            self.handle._fail(self._error(st.errors, st.deaths))
        elif len(st.done) == self.world and st.final is not None:
            self._deliver(st.final)
        elif everyone_exited and len(st.done) < self.world:
            missing = [r for r in range(self.world) if r not in st.done]
            self.teardown()
            self.handle._fail(DdpError(f"ranks {missing} exited without delivering their results"))
        else:
            return False
        return True

    def _deliver(self, final: tuple[str, Any]) -> None:
        for p in self.procs:
            p.join(10.0)
        self.teardown()  # anything still there after delivering is only teardown
        path, tl = final
        timeline = None
        if tl is not None:
            from ._timeline import Timeline

            timeline = Timeline.from_dict(tl)
        self.handle._finish(load_state(path), timeline)

    def _error(self, errors: list[tuple[Any, ...]], deaths: dict[int, int]) -> DdpError:
        causes = [e for e in errors if not e[4]] or errors
        if causes:
            rank, host, text, tb, _ = causes[0]
            return DdpError(
                f"rank {rank} failed: {text}", rank=rank, host=host, remote_traceback=tb
            )
        rank, code = min(deaths.items())
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return DdpError(
            f"rank {rank} {how} without reporting an error (out of memory? killed?)",
            rank=rank,
            host=socket.gethostname(),
        )


def _launch_spawn(payload: RankPayload, metrics_fn: Any, monitor: Any) -> DdpHandle:
    for name in ("model_factory", "optim_factory", "train_step"):
        check_picklable(name, getattr(payload, name))
    for name in ("scheduler", "eval_fn", "guard", "outer_optimizer"):
        check_picklable(name, getattr(payload.cfg, name))
    holder: dict[str, _Spawned] = {}
    handle = DdpHandle(
        len(payload.devices),
        payload.devices,
        metrics_fn=metrics_fn,
        monitor=monitor,
        stop=lambda: holder["w"].stop(),
    )
    watcher = _Spawned(payload, handle)
    holder["w"] = watcher
    threading.Thread(target=watcher.run, name="flodl-ddp-watcher", daemon=True).start()
    return handle
