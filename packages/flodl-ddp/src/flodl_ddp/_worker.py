"""One rank's side of a managed run: build the replica, train (:func:`train_rank`, the same in
every launch), deliver. A spawned rank lives inside :func:`run_process`: it delivers *before*
teardown, reports a failure with its traceback, then leaves with ``os._exit`` (a gloo destructor
that aborts after the work is done must not fail a finished run).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from flodl_core import ConfigError, atomic_path

from ._admission import admit_rank
from ._affinity import bind
from ._comm import Comm, StoreComm
from ._errors import PeerError
from ._handle import TrainedState
from ._membership import StaticWorld
from ._messages import Done, Epoch, Failed, Final, Report
from ._modes import Backend
from ._options import RunSpec
from ._rank import RankContext, RankEngine
from ._reduce import GroupReducer, Reducer, SharedReducer
from ._shm import SharedSlots
from ._watchdog import FINISHED, STARTING, Beacon

_ECHOES = ("Connection closed by peer", "Connection reset", "Broken pipe")


@dataclass
class RankPayload:
    """Everything a rank process needs (pickled into it by the spawn start method)."""

    spec: RunSpec
    model_factory: Callable[..., Any]
    optim_factory: Callable[..., Any]
    train_step: Callable[..., Any]
    devices: list[str]


@dataclass
class SpawnLink:
    """How a spawned rank reaches its run (the store's port and secret key prefix travel only in
    the spawn pipe; an elastic run has its ``ElasticLink`` instead)."""

    queue: Any
    result_dir: str
    t0: float
    parent_pid: int
    progress: Any
    phase: Any
    port: int = 0
    key: str = ""
    elastic: Any = None


def rank_context(
    rank: int, world: int, device: torch.device, comm: Comm, reducer: Any, **kw: Any
) -> RankContext:
    """A :class:`RankContext` on this host: ``t0`` now and a static world unless ``kw`` says."""
    kw = {"t0": time.time(), "membership": StaticWorld(world), **kw}
    return RankContext(rank, world, device, socket.gethostname(), comm, reducer=reducer, **kw)


def build_model(factory: Callable[..., Any], device: torch.device, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # same seed on every rank: replicas start identical
    try:
        wants_device = any(
            p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in inspect.signature(factory).parameters.values()
        )
    except (TypeError, ValueError):
        wants_device = False
    model = factory(device) if wants_device else factory()
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"model_factory returned a {type(model).__name__}; expected an nn.Module")
    return model.to(device)


def train_rank(
    payload: RankPayload,
    ctx: RankContext,
    send: Callable[[Any], None],
    created: Callable[[RankEngine], None] | None = None,
    every_epoch: bool = False,
) -> tuple[RankEngine, Any]:
    """The managed loop of one rank; returns the engine and (rank 0) the merged timeline.
    ``send`` gets the progress and the epochs this rank leads (``every_epoch``: all of them);
    ``created`` the engine as soon as it exists."""
    spec = payload.spec
    if os.environ.get("FLODL_CLUSTER_TOKEN"):  # started by fdl @cluster: prove the run's token
        admit_rank(ctx, spec.timeout_s)
    if ctx.device.type == "cuda":
        torch.cuda.set_device(ctx.device)
    model = build_model(payload.model_factory, ctx.device, spec.seed)
    engine = RankEngine(spec, ctx, model, payload.optim_factory)
    engine.on_event = lambda kind, value: (
        kind == "progress" and send(Report(ctx.rank, progress=value))
    )
    if created is not None:
        created(engine)  # may hear the engine's events itself
    try:
        while engine.next_epoch < spec.num_epochs and not engine.stopping:
            for batch in engine.epoch(engine.next_epoch):
                engine.step(payload.train_step(engine.forward_model, batch))
            if engine.leads_epoch or (every_epoch and engine.metrics):
                send(Epoch(ctx.rank, metrics=engine.metrics[-1]))
        return engine, engine.gather_timeline()
    finally:
        engine.close()


def spawn_picklable(payload: RankPayload, dataset: bool = False) -> None:
    """Spawned ranks receive the factories (and the dataset) by pickling: refuse lambdas and
    local functions or classes. The dataset, maybe large, only once a spawn failed."""
    named = [(n, getattr(payload, n)) for n in ("model_factory", "optim_factory", "train_step")]
    options = ("scheduler", "eval_fn", "guard", "outer_optimizer") + ("dataset",) * dataset
    for name, obj in named + [(n, getattr(payload.spec, n)) for n in options]:
        try:
            pickle.dumps(obj)
        except Exception as e:
            what = getattr(obj, "__qualname__", type(obj).__qualname__)
            raise ConfigError(
                f"{name} {what!r} cannot be sent to the rank processes ({type(e).__name__}: "
                f"{e}); define it (or its class) at the top level of an importable module (not "
                "a lambda, not inside a function), or pass a picklable object"
            ) from None


def set_threads(spec: RunSpec, device: torch.device, local_rank: int, local_world: int) -> None:
    """A rank's cores (``bind_cores``) and thread count (one on a CPU rank unless asked: the
    ranks share the cores), before torch starts its thread pools."""
    if spec.bind_cores:
        bind(local_rank, local_world, spec.threads_per_rank)
    if spec.threads_per_rank is not None:
        torch.set_num_threads(spec.threads_per_rank)
    elif device.type == "cpu":
        torch.set_num_threads(1)


def static_reducer(comm: Comm, spec: RunSpec) -> Callable[[Any], Reducer]:
    """Cadence / async rounds of a static world: shared memory when every rank can map one
    file (host buffers, no ``bf16_wire``), else an all-reduce of the default group."""
    wire = torch.bfloat16 if spec.bf16_wire and spec.mode.backend is Backend.CPU else None

    def make(averager: Any) -> Reducer:
        if spec.shared_memory and comm.world_size > 1:
            eligible = averager.flat.device.type == "cpu" and wire is None
            slots = SharedSlots.open(comm, averager.specs(), eligible)  # a collective
            if slots is not None:
                return SharedReducer(slots, comm.rank)
        return GroupReducer(wire)

    return make


def is_echo(e: BaseException) -> bool:
    """Errors that are usually the echo of another rank's failure, not its cause."""
    echo = isinstance(e, (PeerError, getattr(dist, "DistError", PeerError)))
    return echo or any(s in str(e) for s in _ECHOES)


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:  # the launcher died: do not outlive it
            os._exit(3)


def run_process(
    rank: int, generation: int, payload: RankPayload, link: SpawnLink, body: Callable[..., None]
) -> None:
    """A spawned rank's life: watch the launcher, start the beacon, set the threads, run
    ``body(device, beacon)``, report a failure, leave (module doc)."""
    threading.Thread(target=_watch_parent, args=(link.parent_pid,), daemon=True).start()
    beacon, code = Beacon(rank, link.progress, link.phase), 0
    beacon.set(STARTING)
    try:
        device = torch.device(payload.devices[rank])
        set_threads(payload.spec, device, rank, len(payload.devices))
        body(device, beacon)
    except BaseException as e:
        code, text = 1, f"{type(e).__name__}: {e}"
        with contextlib.suppress(Exception):
            tb = traceback.format_exc()
            link.queue.put(Failed(rank, generation, socket.gethostname(), text, tb, is_echo(e)))
    with contextlib.suppress(Exception):
        link.queue.close()
        link.queue.join_thread()
    # Skip interpreter teardown: gloo's destructors occasionally abort after the work is done,
    # and everything this rank owed has been delivered above.
    os._exit(code)


def deliver(link: SpawnLink, rank: int, generation: int, engine: RankEngine, timeline: Any) -> None:
    """Write the trained state where the supervisor reads it (safetensors, atomically)."""
    from safetensors.torch import save_file

    state, path = engine.final_state(), Path(link.result_dir) / "state.safetensors"
    tensors = {f"p.{k}": v.contiguous() for k, v in state.params.items()}
    tensors.update({f"b.{k}": v.contiguous() for k, v in state.buffers.items()})
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp))
    link.queue.put(Final(rank, generation, str(path), timeline.to_dict() if timeline else None))


def load_state(path: str) -> TrainedState:
    """The trained state :func:`deliver` wrote."""
    from safetensors.torch import load_file

    tensors = load_file(path)
    params = {k[2:]: v for k, v in tensors.items() if k.startswith("p.")}
    return TrainedState(params, {k[2:]: v for k, v in tensors.items() if k.startswith("b.")})


def rank_process(rank: int, generation: int, payload: RankPayload, link: SpawnLink) -> None:
    """Entry point of a spawned rank of a static world."""
    run_process(rank, generation, payload, link, lambda d, b: _static_rank(payload, link, d, b))


def _static_rank(
    payload: RankPayload, link: SpawnLink, device: torch.device, beacon: Beacon
) -> None:
    rank, world, spec = beacon.rank, len(payload.devices), payload.spec
    # One machine: gloo listens on loopback, not on what the host name resolves to.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    timeout = timedelta(seconds=spec.timeout_s)
    tcp = dist.TCPStore("127.0.0.1", link.port, None, False, timeout=timeout)
    store = dist.PrefixStore(link.key, tcp)  # keys no other local process can guess
    backend = "cpu:gloo,cuda:nccl" if any(d.startswith("cuda") for d in payload.devices) else "gloo"
    pg = dist.PrefixStore("pg", store)
    dist.init_process_group(backend, store=pg, rank=rank, world_size=world, timeout=timeout)
    comm = StoreComm(dist.PrefixStore("ctl", store), rank, world, spec.timeout_s)
    reducer = static_reducer(comm, spec)
    ctx = rank_context(rank, world, device, comm, reducer, t0=link.t0, beacon=beacon)
    engine, timeline = train_rank(payload, ctx, link.queue.put)
    if rank == 0:
        deliver(link, rank, 0, engine, timeline)
    beacon.set(FINISHED)
    link.queue.put(Done(rank))
    comm.barrier("fin")  # nobody closes its connections while another still reads
