"""One rank's side of a managed run: build the replica, train, deliver.

:func:`train_rank` is the managed loop of one rank, the same in every launch. A spawned rank
enters through :func:`rank_process` (a static world over the launcher's store) or
:func:`flodl_ddp._elastic_link.elastic_rank_process` (a torchft replica); both write their
result *before* teardown (the rank that finishes the run writes the trained state to a file
the supervisor reads),
report failures with their traceback as typed messages (:mod:`flodl_ddp._messages`), and then
leave with ``os._exit`` so a gloo destructor that aborts after the work is done cannot turn a
finished run into a failed one.
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
from ._comm import StoreComm
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
    """How a spawned rank reaches its run: the store's port and this run's secret key prefix
    (never on the command line, only in the spawn pipe), the supervisor's queue, the result
    folder, the run's start, the launcher's pid, the beacons' shared arrays, and for elastic
    runs what :func:`flodl_ddp._ft.connect` needs."""

    port: int
    key: str
    queue: Any
    result_dir: str
    t0: float
    parent_pid: int
    progress: Any
    phase: Any
    elastic: Any = None  # ElasticLink


# ---- one rank ------------------------------------------------------------------------------------


def build_model(factory: Callable[..., Any], device: torch.device, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)  # same seed on every rank: replicas start identical
    try:
        params = inspect.signature(factory).parameters.values()
        wants_device = any(
            p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            for p in params
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
    ``send`` gets the epochs this rank leads (``every_epoch``: all of them, for a handle of its
    own) and the progress reports; ``created`` the engine as soon as it exists."""
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
    step = payload.train_step
    try:
        while engine.next_epoch < spec.num_epochs:
            for batch in engine.epoch(engine.next_epoch):
                engine.step(step(engine.forward_model, batch))
            if engine.leads_epoch or (every_epoch and engine.metrics):
                send(Epoch(ctx.rank, metrics=engine.metrics[-1]))
        return engine, engine.gather_timeline()
    finally:
        engine.close()


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


def spawn_picklable(payload: RankPayload) -> None:
    """What spawned ranks receive must pickle (module-level functions and plain objects)."""
    for name in ("model_factory", "optim_factory", "train_step"):
        check_picklable(name, getattr(payload, name))
    for name in ("scheduler", "eval_fn", "guard", "outer_optimizer"):
        check_picklable(name, getattr(payload.spec, name))


def set_threads(
    spec: RunSpec, device: torch.device, local_rank: int = 0, local_world: int = 1
) -> None:
    """A rank's CPU resources, before torch starts its thread pools: its cores when
    ``bind_cores`` (local rank ``local_rank`` of ``local_world`` on this host), then its thread
    count."""
    if spec.bind_cores:
        bind(local_rank, local_world, spec.threads_per_rank)
    if spec.threads_per_rank is not None:
        torch.set_num_threads(spec.threads_per_rank)
    elif device.type == "cpu":
        torch.set_num_threads(1)  # ranks share the cores: one thread each unless asked


def pg_backend(devices: list[str]) -> str:
    """gloo for CPU tensors, NCCL for CUDA ones, in one process group."""
    return "cpu:gloo,cuda:nccl" if any(d.startswith("cuda") for d in devices) else "gloo"


def static_reducer(comm: Any, spec: RunSpec) -> Callable[[Any], Reducer]:
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
    if isinstance(e, (PeerError, getattr(dist, "DistError", PeerError))):
        return True
    text = str(e)
    return any(s in text for s in ("Connection closed by peer", "Connection reset", "Broken pipe"))


def watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:  # the launcher died: do not outlive it
            os._exit(3)


def report_failure(q: Any, rank: int, generation: int, e: BaseException) -> None:
    with contextlib.suppress(Exception):
        q.put(
            Failed(
                rank,
                generation,
                socket.gethostname(),
                f"{type(e).__name__}: {e}",
                traceback.format_exc(),
                is_echo(e),
            )
        )


def leave(q: Any, code: int) -> None:
    with contextlib.suppress(Exception):
        q.close()
        q.join_thread()
    # Skip interpreter teardown: gloo's destructors occasionally abort after the work is done,
    # and everything this rank owed has been delivered above.
    os._exit(code)


def rank_process(rank: int, payload: RankPayload, link: SpawnLink) -> None:
    """Entry point of a spawned rank of a static world."""
    threading.Thread(target=watch_parent, args=(link.parent_pid,), daemon=True).start()
    code = 0
    beacon = Beacon(rank, link.progress, link.phase)
    beacon.set(STARTING)
    try:
        spec, world = payload.spec, len(payload.devices)
        device = torch.device(payload.devices[rank])
        set_threads(spec, device, rank, world)
        # One machine: gloo listens on loopback, not on what the host name resolves to.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        timeout = timedelta(seconds=spec.timeout_s)
        tcp = dist.TCPStore("127.0.0.1", link.port, None, False, timeout=timeout)
        store = dist.PrefixStore(link.key, tcp)  # keys no other local process can guess
        dist.init_process_group(
            pg_backend(payload.devices),
            store=dist.PrefixStore("pg", store),
            rank=rank,
            world_size=world,
            timeout=timeout,
        )
        comm = StoreComm(dist.PrefixStore("ctl", store), rank, world, spec.timeout_s)
        ctx = RankContext(
            rank,
            world,
            device,
            socket.gethostname(),
            comm,
            link.t0,
            static_reducer(comm, spec),
            StaticWorld(world),
            beacon=beacon,
        )
        engine, timeline = train_rank(payload, ctx, link.queue.put)
        if rank == 0:
            path = Path(link.result_dir) / "state.safetensors"
            save_state(engine.final_state(), path)
            link.queue.put(Final(rank, 0, str(path), timeline.to_dict() if timeline else None))
        beacon.set(FINISHED)
        link.queue.put(Done(rank))
        comm.barrier("fin")  # nobody closes its connections while another still reads
    except BaseException as e:
        code = 1
        report_failure(link.queue, rank, 0, e)
    leave(link.queue, code)


def save_state(state: TrainedState, path: Path) -> None:
    from safetensors.torch import save_file

    tensors = {f"p.{k}": v.contiguous() for k, v in state.params.items()}
    tensors.update({f"b.{k}": v.contiguous() for k, v in state.buffers.items()})
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp))


def load_state(path: str) -> TrainedState:
    from safetensors.torch import load_file

    tensors = load_file(path)
    params = {k[2:]: v for k, v in tensors.items() if k.startswith("p.")}
    buffers = {k[2:]: v for k, v in tensors.items() if k.startswith("b.")}
    return TrainedState(params, buffers)
