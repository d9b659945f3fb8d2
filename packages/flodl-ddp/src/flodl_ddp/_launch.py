"""Starting a run: every check that can fail before a process starts, then one of four launches.

- **spawned** (a plain process, several devices): the launching process hosts the rendezvous
  ``TCPStore`` on a free loopback port, gives the run an unguessable key prefix (handed to the
  ranks through the spawn pipe: a local process that finds the port cannot guess a key), and a
  :class:`~flodl_ddp._supervisor.Supervisor` starts one process per rank and watches them.
- **elastic** (``.elastic(...)``): the same supervisor with the elastic policy, over torchft
  replicas (:mod:`flodl_ddp._elastic_launch`).
- **under torchrun** (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``LOCAL_RANK`` set): this
  process *is* one rank; it joins the process group from the environment and trains on a
  background thread. torchrun tears the other ranks down when one exits with an error.
- **world size 1**: trains on a background thread of the calling process, with the same handle,
  metrics and result.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import hmac
import itertools
import logging
import os
import secrets
import socket
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from flodl_core import ConfigError, detect_gpus
from flodl_core.data import as_batch_dataset

from ._affinity import check_bindable
from ._comm import SoloComm, StoreComm
from ._config import TrainerConfig
from ._elastic_launch import launch_elastic
from ._errors import DdpError
from ._handle import DdpHandle
from ._membership import StaticWorld
from ._modes import Backend, Mode, Policy
from ._options import RunSpec, check_config, check_world, normalise_devices
from ._rank import RankContext
from ._reduce import LocalReducer
from ._store import listen_store
from ._supervisor import Supervisor
from ._torchrun import init_torchrun_group, local_world, torchrun_env
from ._watchdog import Watchdog
from ._worker import (
    RankPayload,
    SpawnLink,
    rank_process,
    set_threads,
    spawn_picklable,
    static_reducer,
    train_rank,
)

logger = logging.getLogger("flodl.ddp")
_RUNS = itertools.count()


# ---- before anything starts ---------------------------------------------------------------------


def default_devices() -> list[str]:
    """Every GPU :func:`flodl_core.detect_gpus` sees (without initialising CUDA), else one CPU."""
    gpus = detect_gpus()
    return [f"cuda:{i}" for i in range(len(gpus))] if gpus else ["cpu"]


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


def check_devices(devices: list[str], mode: Mode) -> None:
    """Devices the mode can average, and no device named twice (two ranks on one CPU name are
    two processes on the same cores; a CPU index means nothing to torch)."""
    kinds = {d.split(":")[0] for d in devices}
    if len(kinds) > 1 and (mode.backend is Backend.NCCL or mode.policy is Policy.SYNC):
        raise ConfigError(
            f"devices {devices} mix {' and '.join(sorted(kinds))} ranks, which mode "
            f"{mode.name!r} cannot average (its collectives run on the devices' own tensors); "
            "use 'cpu-cadence' or 'cpu-async' to mix device kinds"
        )
    indexed = [d for d in devices if d.startswith("cpu:")]
    if indexed:
        raise ConfigError(
            f"devices {devices} name {indexed[0]}: a CPU has no index in torch (every CPU rank "
            "uses the whole processor); list 'cpu' once per CPU rank, and use "
            ".threads_per_rank(n) / .bind_cores() to share the cores"
        )
    cuda = [d for d in devices if d.startswith("cuda")]
    twice = sorted({d for d in cuda if cuda.count(d) > 1})
    if twice:
        raise ConfigError(
            f"devices {devices} name {twice[0]} twice; give each GPU rank its own GPU"
        )


def start_lr(optim_factory: Callable[..., Any], scale: float) -> str:
    """The learning rate the ranks will train with (the factory's on a stand-in parameter,
    times the run's scale), for the start-up line; ``lr x2`` when the factory cannot say."""
    with contextlib.suppress(Exception):
        opt = optim_factory([torch.nn.Parameter(torch.zeros(1))])
        return f"lr {opt.param_groups[0]['lr'] * scale:g}" + (
            f" (x{scale:g}: linear scaling)" if scale != 1.0 else ""
        )
    return f"lr x{scale:g}"


def summary_line(
    devices: list[str],
    mode: Mode,
    world: int | None = None,
    slowdown: Mapping[int, float] | None = None,
    lr: str = "",
) -> str:
    """``ddp: 2 ranks (heterogeneous) | NVIDIA A | NVIDIA B | nccl-cadence | lr 0.001``.

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
        mem = f" ({g.total_memory / 2**30:.1f} GB)" if g is not None and g.total_memory else ""
        names.append(d if g is None else f"{g.name}{mem}")
    slowed = "".join(
        f", rank {r} slowed {f:g}x" for r, f in sorted((slowdown or {}).items()) if f != 1.0
    )
    tail = f" | {lr}" if lr else ""
    if world is not None:
        return (
            f"  ddp: {world} rank{'s' if world != 1 else ''} under torchrun{slowed} | this node: "
            f"{' | '.join(names)} | {mode.name}{tail}"
        )
    kind = ("heterogeneous" if len(set(names)) > 1 else "homogeneous") + slowed
    n = len(devices)
    return (
        f"  ddp: {n} rank{'s' if n != 1 else ''} ({kind}) | {' | '.join(names)} | {mode.name}{tail}"
    )


def start(
    cfg: TrainerConfig,
    model_factory: Callable[..., Any],
    optim_factory: Callable[..., Any],
    train_step: Callable[..., Any],
) -> DdpHandle:
    """Check everything, print the start-up line, launch as the environment says."""
    spec = check_config(cfg)
    devices = normalise_devices(cfg.devices) if cfg.devices is not None else default_devices()
    env = torchrun_env()
    # Under torchrun this process is one rank of WORLD_SIZE, whatever `devices` lists.
    world = len(devices) if env is None else int(env["world_size"])
    check_world(spec, world, len(as_batch_dataset(spec.dataset)))
    check_devices(devices, spec.mode)
    check_cuda_devices(devices)
    if spec.bind_cores:
        here = len(devices) if env is None else local_world(devices, cfg.devices is not None)
        check_bindable(here, spec.threads_per_rank)
    if (env is None or env["rank"] == 0) and logging.getLogger("flodl").isEnabledFor(logging.INFO):
        lr = start_lr(optim_factory, spec.lr_scale(world))
        print(
            summary_line(devices, spec.mode, world if env else None, spec.slowdown, lr), flush=True
        )
    payload = RankPayload(spec, model_factory, optim_factory, train_step, devices)
    watchers = {
        "metrics_fn": cfg.metrics_fn,
        "monitor": cfg.monitor,
        "record_log": cfg.record_log,
        "save_dashboard": cfg.save_dashboard,
    }
    if spec.elastic is not None:
        return launch_elastic(payload, watchers)
    if env is not None:
        return _launch_torchrun(payload, env, watchers)
    if world == 1:
        return _launch_local(payload, watchers)
    return _launch_spawn(payload, watchers)


# ---- the launches -------------------------------------------------------------------------------


def _in_process(payload: RankPayload) -> RankPayload:
    # In-process ranks must not mutate the caller's guard / outer optimizer objects.
    s = payload.spec
    spec = replace(
        s, guard=copy.deepcopy(s.guard), outer_optimizer=copy.deepcopy(s.outer_optimizer)
    )
    return replace(payload, spec=spec)


def _local_error(e: BaseException, rank: int, host: str) -> DdpError:
    if isinstance(e, DdpError) and e.rank is not None:
        return e
    err = DdpError(
        f"rank {rank} failed: {type(e).__name__}: {e}",
        rank=rank,
        host=host,
        remote_traceback="".join(traceback.format_exception(e)),
    )
    err.__cause__ = e
    return err


def _on_thread(handle: DdpHandle, name: str, body: Callable[[], Any]) -> None:
    """Run ``body() -> (state, timeline)`` on a thread that resolves ``handle``."""

    def run() -> None:
        try:
            handle._finish(*body())
        except BaseException as e:
            handle._fail(_local_error(e, int(name.rsplit("rank", 1)[-1]), socket.gethostname()))

    threading.Thread(target=run, name=name, daemon=True).start()


def _send(handle: DdpHandle) -> Callable[[Any], None]:
    def send(msg: Any) -> None:
        if getattr(msg, "metrics", None) is not None:
            handle._push_metrics(msg.metrics)
        elif getattr(msg, "progress", None) is not None:
            handle._push_progress(msg.progress)

    return send


def _launch_local(payload: RankPayload, watchers: dict[str, Any]) -> DdpHandle:
    payload = _in_process(payload)
    handle = DdpHandle(1, payload.devices, **watchers)
    device = torch.device(payload.devices[0])

    def body() -> tuple[Any, Any]:
        if payload.spec.threads_per_rank is not None:
            # only when asked: this is the caller's process (the count is per thread)
            torch.set_num_threads(payload.spec.threads_per_rank)
        ctx_ = _context(0, 1, device, SoloComm(), StaticWorld(1), lambda _a: LocalReducer())
        engine, timeline = train_rank(payload, ctx_, _send(handle))
        return engine.final_state(), timeline

    _on_thread(handle, "flodl-ddp-rank0", body)
    return handle


def _context(
    rank: int, world: int, device: torch.device, comm: Any, membership: Any, reducer: Any
) -> RankContext:
    return RankContext(
        rank, world, device, socket.gethostname(), comm, time.time(), reducer, membership
    )


def run_key(salt: str) -> str:
    """The store key prefix of a run: from the cluster's run token under ``fdl @cluster`` (every
    rank derives the same one), else from ``salt``."""
    token = os.environ.get("FLODL_CLUSTER_TOKEN")
    if token:
        return hmac.new(token.encode(), f"store:{salt}".encode(), hashlib.sha256).hexdigest()[:32]
    return f"flodl-ddp/{salt}"


def _launch_torchrun(
    payload: RankPayload, env: dict[str, Any], watchers: dict[str, Any]
) -> DdpHandle:
    payload = _in_process(payload)
    rank, world, local = int(env["rank"]), int(env["world_size"]), int(env["local_rank"])
    device = torch.device(payload.devices[local % len(payload.devices)])
    lead = watchers if rank == 0 else {}
    handle = DdpHandle(world, [str(device)], **lead)

    def body() -> tuple[Any, Any]:
        set_threads(payload.spec, device, local, local_world(payload.devices, True))
        created = not dist.is_initialized()
        if created:
            backend = "cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo"
            init_torchrun_group(backend, payload.spec.timeout_s)  # restart-safe
        try:
            from torch.distributed.distributed_c10d import _get_default_store

            # Every rank calls run() the same number of times: the count names this run's keys,
            # so a second run in the same process group never reads the first one's messages.
            store = dist.PrefixStore(run_key(f"run{next(_RUNS)}"), _get_default_store())
            comm = StoreComm(store, rank, world, payload.spec.timeout_s)
            ctx_ = _context(
                rank, world, device, comm, StaticWorld(world), static_reducer(comm, payload.spec)
            )
            engine, timeline = train_rank(payload, ctx_, _send(handle), every_epoch=True)
            comm.barrier("fin")
            return engine.final_state(), timeline
        finally:
            # The group goes before join() returns: a script that exits right after join() must
            # not race gloo's teardown in this thread.
            if created:
                with contextlib.suppress(Exception):
                    dist.destroy_process_group()

    _on_thread(handle, f"flodl-ddp-rank{rank}", body)
    return handle


def static_watchdog(spec: RunSpec) -> Callable[..., Callable[..., Watchdog]]:
    """A static world's watchdog: a rank stopped for ``min(10 s, timeout / 2)`` is dead (its
    peers would wait for it until the timeout), one that sits in a batch or a wait past the
    run's timeout too."""
    t = spec.timeout_s
    return lambda progress, phase: (
        lambda kill: Watchdog(progress, phase, t, min(10.0, t / 2), t, kill)
    )


def _launch_spawn(payload: RankPayload, watchers: dict[str, Any]) -> DdpHandle:
    import torch.multiprocessing as mp

    spawn_picklable(payload)
    world = len(payload.devices)
    ctx = mp.get_context("spawn")
    handle = DdpHandle(world, payload.devices, **watchers)
    # loopback only: the store carries the ranks' control messages
    store = listen_store("127.0.0.1", 0, timeout_s=payload.spec.timeout_s)
    progress, phase = ctx.Array("q", world, lock=False), ctx.Array("b", world, lock=False)
    sup: Supervisor

    def target(rank: int, generation: int) -> tuple[Callable[..., None], tuple[Any, ...]]:
        link = SpawnLink(store.port, key, sup.queue, sup.tmp.name, t0, os.getpid(), progress, phase)
        return rank_process, (rank, payload, link)

    key, t0 = secrets.token_hex(16), time.time()
    sup = Supervisor(handle, world, ctx, target, static_watchdog(payload.spec)(progress, phase))
    handle._attach(sup, keep=store)
    sup.start()
    return handle
