"""Starting a run: every check that can fail before a process starts, then one of four launches:
spawned ranks watched by a :class:`~flodl_ddp._supervisor.Supervisor` (several devices), the same
over torchft replicas (elastic), or on a thread of this process (a world of one, or this
process's rank under torchrun), all with the same handle, metrics and result.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import secrets
import socket
import threading
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist

from flodl_core import ConfigError, detect_gpus
from flodl_core.data import as_batch_dataset

from ._affinity import check_bindable
from ._comm import Comm, SoloComm
from ._config import TrainerConfig
from ._elastic_launch import launch_elastic
from ._errors import DdpError
from ._handle import DdpHandle, TrainedState
from ._modes import Backend, Mode, Policy
from ._options import check_config, check_world, normalise_devices
from ._reduce import LocalReducer
from ._store import listen_store
from ._supervisor import Supervisor, refuse_unguarded_rerun
from ._torchrun import group_comm, join_group, local_world, torchrun_env
from ._worker import (
    RankPayload,
    rank_context,
    rank_process,
    set_threads,
    spawn_picklable,
    static_reducer,
    train_rank,
)

logger = logging.getLogger("flodl.ddp")
_RUNS = itertools.count()
_WATCHERS = ("metrics_fn", "monitor", "record_log", "save_dashboard")  # the handle's options


def default_devices() -> list[str]:
    """Every GPU :func:`flodl_core.detect_gpus` sees (without initialising CUDA), else one CPU."""
    return [f"cuda:{i}" for i in range(len(detect_gpus()))] or ["cpu"]


def check_cuda_devices(devices: list[str]) -> None:
    """Refuse CUDA devices this machine cannot give (torch's build, the GPU listing when there is
    one), before any rank starts and without initialising CUDA."""
    cuda = [d for d in devices if d.startswith("cuda")]
    if not cuda:
        return
    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        raise ConfigError(
            f"devices {devices} name {cuda[0]}, but this torch ({torch.__version__}) is built "
            "without CUDA; install a CUDA build of torch, or train on 'cpu' devices"
        )
    n = len(detect_gpus())
    for d in cuda:
        if n and (torch.device(d).index or 0) >= n:
            seen = ", ".join(f"cuda:{i}" for i in range(n))
            raise ConfigError(
                f"devices {devices} name {d}, but this machine shows {n} GPU"
                f"{'s' if n > 1 else ''} ({seen}); CUDA_VISIBLE_DEVICES narrows that list"
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
    if dup := sorted({d for d in cuda if cuda.count(d) > 1}):
        raise ConfigError(f"devices {devices} name {dup[0]} twice; give each GPU rank its own GPU")


def start_lr(optim_factory: Callable[..., Any], scale: float) -> str:
    """The learning rate the ranks will train with (the factory's on a stand-in parameter,
    times the run's scale), for the start-up line; ``lr x2`` when the factory cannot say."""
    with contextlib.suppress(Exception):
        lr = optim_factory([torch.nn.Parameter(torch.zeros(1))]).param_groups[0]["lr"]
        return f"lr {lr * scale:g}" + (f" (x{scale:g}: linear scaling)" if scale != 1.0 else "")
    return f"lr x{scale:g}"


def summary_line(
    devices: list[str],
    mode: Mode,
    world: int | None = None,
    slowdown: Mapping[int, float] | None = None,
    lr: str = "",
) -> str:
    """``ddp: 2 ranks (heterogeneous) | NVIDIA A | NVIDIA B | nccl-cadence | lr 0.001``; under
    torchrun (``world`` given) a process knows only its own node's devices:
    ``ddp: 4 ranks under torchrun | this node: NVIDIA A | NVIDIA B | nccl-cadence``. A ``slowdown``
    (the testing aid) is named, so a log never passes equal devices off as different ones:
    ``ddp: 2 ranks (homogeneous, rank 1 slowed 2x) | cpu | cpu | cpu-async``."""
    cuda = any(d.startswith("cuda") for d in devices)
    gpus = {f"cuda:{i}": g for i, g in enumerate(detect_gpus())} if cuda else {}
    names = []
    for d in devices:
        g = gpus.get(d if ":" in d else f"{d}:0")
        mem = f" ({g.total_memory / 2**30:.1f} GB)" if g is not None and g.total_memory else ""
        names.append(d if g is None else f"{g.name}{mem}")
    slowed = "".join(
        f", rank {r} slowed {f:g}x" for r, f in sorted((slowdown or {}).items()) if f != 1.0
    )
    listed, tail = " | ".join(names), f" | {mode.name}" + (f" | {lr}" if lr else "")
    if world is not None:
        s = "s" if world != 1 else ""
        return f"  ddp: {world} rank{s} under torchrun{slowed} | this node: {listed}{tail}"
    kind = ("heterogeneous" if len(set(names)) > 1 else "homogeneous") + slowed
    s = "s" if len(devices) != 1 else ""
    return f"  ddp: {len(devices)} rank{s} ({kind}) | {listed}{tail}"


def start(cfg: TrainerConfig, factories: tuple[Callable[..., Any], ...]) -> DdpHandle:
    """Check everything, print the start-up line, launch as the environment says (``factories``:
    the model factory, the optimizer factory, the train step)."""
    refuse_unguarded_rerun()
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
        lr = start_lr(factories[1], spec.lr_scale(world))
        line = summary_line(devices, spec.mode, world if env else None, spec.slowdown, lr)
        print(line, flush=True)
    payload = RankPayload(spec, *factories, devices)
    watchers = {k: getattr(cfg, k) for k in _WATCHERS}
    if spec.elastic is not None:
        return launch_elastic(payload, watchers)
    if env is None and world > 1:
        return _launch_spawn(payload, watchers)
    return _launch_in_process(payload, watchers, env)


def _launch_spawn(payload: RankPayload, watchers: dict[str, Any]) -> DdpHandle:
    spawn_picklable(payload)
    handle = DdpHandle(len(payload.devices), payload.devices, **watchers)
    t = payload.spec.timeout_s
    store = listen_store("127.0.0.1", 0, timeout_s=t)  # loopback: the ranks' control messages
    # A rank stopped for min(10 s, timeout / 2) is dead (its peers would wait for it until the
    # timeout), one that sits in a batch or a wait past the run's timeout too.
    limits = (t, min(10.0, t / 2), t)
    key = secrets.token_hex(16)
    sup = Supervisor(handle, payload, rank_process, limits, port=store.port, key=key)
    handle._attach(sup, store, lambda: store.add(f"{key}/ctl/stop", 1))  # the ranks' comm key
    sup.start()
    return handle


def _launch_in_process(
    payload: RankPayload, watchers: dict[str, Any], env: dict[str, Any] | None
) -> DdpHandle:
    """A world of one, or this process's rank under torchrun: it trains on a thread."""
    s = payload.spec  # in-process ranks must not mutate the caller's guard / outer optimizer
    guard, outer = copy.deepcopy(s.guard), copy.deepcopy(s.outer_optimizer)
    payload = replace(payload, spec=replace(s, guard=guard, outer_optimizer=outer))
    rank, world = (env["rank"], env["world_size"]) if env else (0, 1)
    device = torch.device(payload.devices[env["local_rank"] % len(payload.devices) if env else 0])
    handle = DdpHandle(world, [str(device)], **(watchers if rank == 0 else {}))

    def run() -> None:
        try:
            handle._finish(*_train_here(payload, env, device, handle))
        except BaseException as e:
            err = e
            if not (isinstance(e, DdpError) and e.rank is not None):
                tb = "".join(traceback.format_exception(e))
                text = f"rank {rank} failed: {type(e).__name__}: {e}"
                err = DdpError(text, rank=rank, host=socket.gethostname(), remote_traceback=tb)
                err.__cause__ = e
            handle._fail(err)

    threading.Thread(target=run, name=f"flodl-ddp-rank{rank}", daemon=True).start()
    return handle


def _train_here(
    payload: RankPayload, env: dict[str, Any] | None, device: torch.device, handle: DdpHandle
) -> tuple[TrainedState, Any]:
    spec, created = payload.spec, False

    def send(msg: Any) -> None:
        if getattr(msg, "metrics", None) is not None:
            handle._push_metrics(msg.metrics)
        elif getattr(msg, "progress", None) is not None:
            handle._push_progress(msg.progress)

    rank, world = (env["rank"], env["world_size"]) if env else (0, 1)
    try:
        if env is not None:
            set_threads(spec, device, env["local_rank"], local_world(payload.devices, True))
            created = join_group(device, spec.timeout_s)
            # Every rank calls run() the same number of times: the count names this run's keys,
            # so a second run in the same process group never reads the first one's messages.
            comm: Comm = group_comm(f"run{next(_RUNS)}", spec.timeout_s)
            reducer = static_reducer(comm, spec)
        else:
            if spec.threads_per_rank is not None:  # this is the caller's process: only when asked
                torch.set_num_threads(spec.threads_per_rank)
            comm, reducer = SoloComm(), lambda _a: LocalReducer()
        handle._ask_stop = ask = lambda: comm.counter("stop", 1)  # store and dict: thread-safe
        if handle._stop_asked:
            ask()
        engine, timeline = train_rank(
            payload, rank_context(rank, world, device, comm, reducer), send, every_epoch=True
        )
        comm.barrier("fin")
        return engine.final_state(), timeline
    finally:
        # The group goes before join() returns: a script that exits right after join() must
        # not race gloo's teardown in this thread.
        if created:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
