"""One rank of an elastic run: a torchft replica driving the same engine as every other run.

:func:`elastic_rank_process` is the spawned rank's entry point. It connects this rank's torchft
manager (:func:`flodl_ddp._ft.connect`), whose heal path hands a rejoining rank the committed
state of a living peer (:meth:`RankEngine.state_dict`: weights, optimizer, ElChe and the other
controllers, the epoch's cursor and tally), and runs :func:`~flodl_ddp._worker.train_rank` with
the torchft strategies plugged in. The rank that leads the last window writes the trained
state; every finishing rank sends a fingerprint of its weights.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ._ft import FtComm, FtReducer, TorchftQuorum, connect
from ._messages import Counts, Done, Final, Healed, Listening, Report, RolledBack
from ._rank import RankContext, RankEngine
from ._watchdog import FINISHED, STARTING, Beacon
from ._worker import (
    RankPayload,
    SpawnLink,
    leave,
    report_failure,
    save_state,
    set_threads,
    train_rank,
    watch_parent,
)


@dataclass
class ElasticLink:
    """What an elastic rank needs beyond a static one: the address everything binds and its
    interface (gloo's), the lighthouse, the run's random token (heal transfers), the least
    number of living ranks, and the shared "ready" flags of the first generation (1 ready, -1
    died before the start)."""

    host: str
    ifname: str
    lighthouse: str
    token: str
    min_ranks: int
    ready: Any


def fingerprint(model: torch.nn.Module) -> list[float]:
    """``[Σθ, Σ|θ|, Σθ²]`` over every parameter in float64: equal weights, equal prints."""
    flat = torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in model.parameters()])
    return [float(flat.sum()), float(flat.abs().sum()), float((flat * flat).sum())]


def elastic_rank_process(rank: int, generation: int, payload: RankPayload, link: SpawnLink) -> None:
    """Entry point of a spawned elastic rank (generation 0: started with the run; later: a
    restart, which heals from a living peer at its first window)."""
    threading.Thread(target=watch_parent, args=(link.parent_pid,), daemon=True).start()
    os.environ.setdefault("RUST_LOG", "error")  # torchft logs each quorum at INFO otherwise
    # A peer's death is expected here: torchft reports each one as an ERROR with a traceback;
    # the supervisor logs deaths itself.
    for name in ("torchft", "torchft_quorums", "torchft_commits", "torchft_errors"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    code = 0
    try:
        _run(rank, generation, payload, link)
    except BaseException as e:
        code = 1
        report_failure(link.queue, rank, generation, e)
    leave(link.queue, code)


def _run(rank: int, generation: int, payload: RankPayload, link: SpawnLink) -> None:
    spec, world, el = payload.spec, len(payload.devices), link.elastic
    device = torch.device(payload.devices[rank])
    beacon = Beacon(rank, link.progress, link.phase)
    beacon.set(STARTING)
    set_threads(spec, device, rank, world)
    os.environ["GLOO_SOCKET_IFNAME"] = el.ifname
    holder: dict[str, RankEngine] = {}

    def created(engine: RankEngine) -> None:
        holder["engine"] = engine

        def event(kind: str, value: Any) -> None:
            if kind == "progress":
                link.queue.put(Report(rank, generation, progress=value))
            elif kind == "rollback":
                link.queue.put(RolledBack(rank, generation, value))
            elif kind == "commit":
                link.queue.put(Counts(rank, generation, *value))

        engine.on_event = event

    def heal(state: Any) -> None:
        engine = holder["engine"]
        engine.load_state_dict(state)
        if engine.window > 0:  # not the first quorum's sync of the initial weights
            link.queue.put(Healed(rank, generation, engine.next_epoch, engine.cursor))

    ft = connect(
        rank,
        el.host,
        el.lighthouse,
        el.token,
        spec.timeout_s,
        el.min_ranks,
        (lambda: holder["engine"].state_dict(), heal),
    )
    link.queue.put(Listening(rank, generation, ft.ports))
    el.ready[rank] = 1
    if generation == 0:
        _wait_for_peers(el.ready, world, spec.timeout_s)
    comm = FtComm(ft.manager, rank, world)
    ctx = RankContext(
        rank,
        world,
        device,
        socket.gethostname(),
        comm,
        link.t0,
        lambda _averager: FtReducer(ft.manager, rank),
        TorchftQuorum(ft.manager, comm),
        hosts=[socket.gethostname()] * world,
        devices=list(payload.devices),
        beacon=beacon,
    )
    # the engine is built inside train_rank; the heal hook reaches it through the holder
    engine, _ = train_rank(payload, ctx, link.queue.put, created=created)
    beacon.set(FINISHED)
    if engine.leads_epoch:  # first in the last window's quorum: exactly one rank writes
        path = Path(link.result_dir) / "state.safetensors"
        save_state(engine.final_state(), path)
        link.queue.put(Final(rank, generation, str(path)))
    link.queue.put(Done(rank, generation, fingerprint(engine.model)))


def _wait_for_peers(ready: Any, world: int, timeout: float) -> None:
    # Every first-generation rank heartbeats before anyone asks for a quorum, so the first
    # quorum holds them all (the lighthouse waits for every heartbeating replica).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(ready[r] != 0 for r in range(world)):
            return
        time.sleep(0.01)
