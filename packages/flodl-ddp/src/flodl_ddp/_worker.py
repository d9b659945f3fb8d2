"""One rank's side of a managed run: build the replica, train, deliver.

:func:`train_rank` is the managed loop of one rank (the same in every launch). A spawned rank
enters through :func:`rank_process`: it joins the process group through the launching process's
store, trains, writes its result *before* teardown (rank 0 writes the trained state to a file the
launcher reads), reports failures with their traceback through the queue, and then leaves with
``os._exit`` so a gloo destructor that aborts after the work is done cannot turn a finished run
into a failed one.
"""

from __future__ import annotations

import contextlib
import inspect
import os
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

from ._affinity import bind
from ._comm import Comm
from ._config import TrainerConfig
from ._handle import TrainedState
from ._metrics import EpochMetrics
from ._modes import Mode
from ._rank import RankContext, RankEngine


@dataclass
class RankPayload:
    """Everything a rank process needs (pickled into it by the spawn start method)."""

    cfg: TrainerConfig
    mode: Mode
    model_factory: Callable[..., Any]
    optim_factory: Callable[..., Any]
    train_step: Callable[..., Any]
    devices: list[str]


# ---- one rank ------------------------------------------------------------------------------------


def _build_model(factory: Callable[..., Any], device: torch.device, seed: int) -> torch.nn.Module:
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
    payload: RankPayload, ctx: RankContext, on_metrics: Callable[[EpochMetrics], None]
) -> tuple[TrainedState, Any]:
    """The managed loop of one rank; returns the trained state and (rank 0) the timeline."""
    cfg = payload.cfg
    device = ctx.device
    if os.environ.get("FLODL_CLUSTER_TOKEN"):  # started by fdl @cluster: prove the run's token
        from ._admission import admit_rank

        admit_rank(ctx, cfg.timeout_s)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    model = _build_model(payload.model_factory, device, cfg.seed)
    engine = RankEngine(cfg, payload.mode, ctx, model, payload.optim_factory)
    step = payload.train_step
    try:
        for epoch in range(engine.start_epoch, int(cfg.num_epochs)):  # type: ignore[arg-type]
            for batch in engine.epoch(epoch):
                engine.step(step(engine.forward_model, batch))
            on_metrics(engine.metrics[-1])
        timeline = engine.gather_timeline()
        return engine.final_state(), timeline
    finally:
        engine.sink.uninstall()


def set_threads(
    cfg: TrainerConfig, device: torch.device, local_rank: int = 0, local_world: int = 1
) -> None:
    """A rank's CPU resources, before torch starts its thread pools: its cores when
    ``bind_cores`` (local rank ``local_rank`` of ``local_world`` on this host), then its thread
    count."""
    if cfg.bind_cores:
        bind(local_rank, local_world, cfg.threads_per_rank)
    if cfg.threads_per_rank is not None:
        torch.set_num_threads(cfg.threads_per_rank)
    elif device.type == "cpu":
        torch.set_num_threads(1)  # ranks share the cores: one thread each unless asked


def pg_backend(devices: list[str]) -> str:
    return "cpu:gloo,cuda:nccl" if any(d.startswith("cuda") for d in devices) else "gloo"


def _is_comm_error(e: BaseException) -> bool:
    """Errors that are usually the echo of another rank's failure, not its cause."""
    if isinstance(e, getattr(dist, "DistError", ())):
        return True
    text = str(e)
    return any(
        s in text for s in ("Connection closed by peer", "Connection reset", "Broken pipe", "gloo")
    )


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:  # the launcher died: do not outlive it
            os._exit(3)


def rank_process(
    rank: int,
    world_size: int,
    port: int,
    payload: RankPayload,
    q: Any,
    result_dir: str,
    t0: float,
    parent_pid: int,
) -> None:
    """Entry point of a spawned rank process."""
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    host = socket.gethostname()
    code = 0
    try:
        cfg = payload.cfg
        device = torch.device(payload.devices[rank])
        set_threads(cfg, device, rank, world_size)
        timeout = timedelta(seconds=cfg.timeout_s)
        store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timeout)
        dist.init_process_group(
            pg_backend(payload.devices),
            store=dist.PrefixStore("pg", store),
            rank=rank,
            world_size=world_size,
            timeout=timeout,
        )
        comm = Comm(dist.PrefixStore("ctl", store), rank, world_size)
        ctx = RankContext(rank, world_size, device, host, comm, t0)

        def send(m: EpochMetrics) -> None:
            if rank == 0:
                q.put(("metrics", m))

        state, timeline = train_rank(payload, ctx, send)
        if rank == 0:
            path = Path(result_dir) / "state.safetensors"
            _save_state(state, path)
            q.put(("final", str(path), timeline.to_dict() if timeline is not None else None))
        q.put(("done", rank))
        comm.barrier("fin")  # nobody closes its connections while another still reads
    except BaseException as e:
        code = 1
        with contextlib.suppress(Exception):
            q.put(
                (
                    "error",
                    rank,
                    host,
                    f"{type(e).__name__}: {e}",
                    traceback.format_exc(),
                    _is_comm_error(e),
                )
            )
    with contextlib.suppress(Exception):
        q.close()
        q.join_thread()
    # Skip interpreter teardown: gloo's destructors occasionally abort after the work is done,
    # and everything this rank owed has been delivered above.
    os._exit(code)


def _save_state(state: TrainedState, path: Path) -> None:
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
