"""One rank of an elastic run: a torchft replica (:mod:`._ft`) driving the same engine as every
other run. The rank that leads the last window writes the trained state; every finishing rank
sends a fingerprint of its weights.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import torch

from ._ft import FtComm, FtReducer, Outlived, TorchftQuorum, connect
from ._messages import Counts, Done, Healed, Listening, Report, RolledBack
from ._rank import RankEngine
from ._watchdog import FINISHED, Beacon
from ._worker import RankPayload, SpawnLink, deliver, rank_context, run_process, train_rank


@dataclass
class ElasticLink:
    """What an elastic rank needs beyond a static one; ``ready``: the first generation's shared
    flags (1 ready, -1 died before the start)."""

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
    os.environ.setdefault("RUST_LOG", "error")  # torchft logs each quorum at INFO otherwise
    # torchft logs each (expected) peer death as an ERROR; the supervisor logs deaths itself
    for name in ("torchft", "torchft_quorums", "torchft_commits", "torchft_errors"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    run_process(rank, generation, payload, link, lambda d, b: _run(generation, payload, link, d, b))


def _await_first_generation(el: ElasticLink, world: int, timeout_s: float) -> None:
    """Every first-generation rank heartbeats before anyone asks for a quorum, so the first
    quorum holds them all (the lighthouse waits for every heartbeating replica)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(el.ready[r] == 0 for r in range(world)):
        time.sleep(0.01)


def _run(gen: int, payload: RankPayload, link: SpawnLink, device: Any, beacon: Beacon) -> None:
    rank, world, el, put = beacon.rank, len(payload.devices), link.elastic, link.queue.put
    os.environ["GLOO_SOCKET_IFNAME"] = el.ifname
    holder: dict[str, RankEngine] = {}  # the engine is built inside train_rank, after connect
    messages = {
        "progress": lambda v: Report(rank, gen, progress=v),
        "rollback": lambda v: RolledBack(rank, gen, v),
        "commit": lambda v: Counts(rank, gen, *v),
    }

    def created(engine: RankEngine) -> None:
        holder["engine"] = engine
        engine.on_event = lambda kind, value: put(messages[kind](value))

    def heal(state: Any) -> None:
        engine = holder["engine"]
        engine.load_state_dict(state)
        if engine.window > 0:  # not the first quorum's sync of the initial weights
            put(Healed(rank, gen, engine.next_epoch, engine.cursor))

    ft = connect(rank, el, payload.spec.timeout_s, (lambda: holder["engine"].state_dict(), heal))
    put(Listening(rank, gen, ft.ports))
    el.ready[rank] = 1
    if gen == 0:
        _await_first_generation(el, world, payload.spec.timeout_s)
    comm, reducer = FtComm(ft.manager, rank, world), FtReducer(ft.manager, rank)
    # hosts and devices given: exchanging them would need a quorum first
    kw = {"t0": link.t0, "beacon": beacon, "hosts": [socket.gethostname()] * world}
    kw |= {"membership": TorchftQuorum(ft.manager, comm, gen > 0), "devices": list(payload.devices)}
    ctx = rank_context(rank, world, device, comm, lambda _a: reducer, **kw)
    try:
        engine, _ = train_rank(payload, ctx, put, created=created)
    except Outlived as e:  # exit code 0: nothing to deliver, nothing went wrong
        logging.getLogger("flodl.ddp").warning("elastic: rank %d leaves: %s", rank, e)
        return
    beacon.set(FINISHED)
    if engine.leads_epoch:  # first in the last window's quorum: exactly one rank writes
        deliver(link, rank, gen, engine, None)
    put(Done(rank, gen, fingerprint(engine.model)))
