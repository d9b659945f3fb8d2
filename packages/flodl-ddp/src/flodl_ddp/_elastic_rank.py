"""One rank of an elastic run: a torchft replica that trains in averaging windows.

Each window:

1. **quorum** (``manager.start_quorum``): the lighthouse names the living ranks; a rank that is
   behind (restarted, or new) receives the committed state from a living peer first (heal);
2. **plan**: the next ``min(left, n · anchor)`` batches of the epoch's order (from the shared
   *cursor*) are split over the ``n`` participants in quorum order: nobody's share is tied to a
   rank that may die, so a dead rank's unprocessed data simply goes to whoever is alive;
3. **train** this rank's batches;
4. **average** with fault-tolerant all-reduces: ``Σ count_r θ_r / Σ count_r`` (the weights
   re-normalise over the living, count-weighted like ElChe's) plus the window's per-rank
   numbers (batches, losses, recorded scalars);
5. **commit** (``manager.should_commit``): on success the consensus (through the outer
   optimizer) becomes the weights and the cursor moves on; if a peer died mid-window the window
   is void: weights, optimizer and numbers roll back to the window's start and the same batches
   are planned again over the survivors.

So within an epoch every sample is trained exactly once in the surviving weights. The state a
healing rank receives is the committed one: weights, optimizer state, outer optimizer, epoch,
cursor and the epoch's numbers so far.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
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
from torch import Tensor

from flodl_core import ConfigError, DataLoader

from ._elastic import ElasticOptions, Exposure, require_torchft
from ._elastic_transport import StateTransport
from ._metrics import EpochMetrics, ScalarSink, combine_ranks, run_eval
from ._store import listen_store
from ._warmup import warm_up
from ._worker import RankPayload, _build_model, _save_state, set_threads

# phase codes shared with the launcher's watchdog
STARTING, COMPUTING, WAITING, FINISHED = 0, 1, 2, 3
ANNOUNCE_BYTES = 128  # per rank and window: JSON names of newly recorded scalars
RANK_FIELDS = 3  # per rank and window: batches, loss sum, compute ms


@dataclass
class ElasticPayload:
    """What an elastic rank process receives (pickled by the spawn start method)."""

    base: RankPayload
    opts: ElasticOptions
    exposure: Exposure
    lighthouse: str
    token: str


@dataclass
class RankSignals:
    """Shared-memory slots the launcher reads: per rank a batch counter, a phase, a ready flag."""

    progress: Any  # multiprocessing Array('q', world)
    phase: Any  # Array('b', world)
    ready: Any  # Array('b', world): 1 ready, -1 died before the start


def split_batches(total: int, n: int) -> list[int]:
    """``total`` batches over ``n`` participants: equal, the remainder to the first ones."""
    base, extra = divmod(total, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def _bound_manager_server(real: Any, host: str) -> Callable[..., Any]:
    # torchft's Manager binds its server to "[::]:port"; flodl binds it to one address.
    def make(**kw: Any) -> Any:
        port = str(kw.get("bind", ":0")).rsplit(":", 1)[-1]
        kw["bind"] = f"{host}:{port}"
        return real(**kw)

    return make


class ElasticEngine:
    """The rank's model, optimizer, data and committed state; :meth:`run` trains to the end."""

    def __init__(
        self,
        rank: int,
        payload: ElasticPayload,
        signals: RankSignals,
        send: Callable[[tuple[Any, ...]], None],
        result_dir: str,
    ) -> None:
        base = payload.base
        self.cfg = cfg = base.cfg
        self.rank = rank
        self.world = len(base.devices)
        self.payload = payload
        self.signals = signals
        self.send = send
        self.result_dir = result_dir
        self.device = torch.device(base.devices[rank])
        self.host = socket.gethostname()
        self.model = _build_model(base.model_factory, self.device, cfg.seed)
        self.optimizer = base.optim_factory(list(self.model.parameters()))
        if not isinstance(self.optimizer, torch.optim.Optimizer):
            raise ConfigError(
                f"optim_factory returned a {type(self.optimizer).__name__}; expected a "
                "torch.optim.Optimizer built on the parameters it was given"
            )
        scale = 1.0 + float(cfg.lr_scale_ratio) * (self.world - 1)
        for g in self.optimizer.param_groups:
            g["lr"] = g["lr"] * scale
        torch.manual_seed(cfg.seed * 1009 + 7919 * (rank + 1))
        self.params = list(self.model.parameters())
        self.fbufs = [b for b in self.model.buffers() if b.is_floating_point()]
        self.ibufs = [b for b in self.model.buffers() if not b.is_floating_point()]
        self.outer = cfg.outer_optimizer
        from ._outer import OuterAvg

        if self.outer is not None and type(self.outer) is OuterAvg:
            self.outer = None
        self.global_params = (
            [p.detach().to("cpu", copy=True) for p in self.params] if self.outer else None
        )
        self.bs = int(cfg.batch_size)  # type: ignore[arg-type]
        self.loader = DataLoader(
            cfg.dataset,
            batch_size=self.bs,
            device=self.device,
            seed=cfg.seed,
            shuffle=True,
            drop_last=True,
        )
        whole = self.loader.num_samples // self.bs
        self.epoch_batches = min(whole, cfg.batches_per_epoch or whole)
        self.anchor = int(cfg.anchor)
        self.sink = ScalarSink()
        # committed, shared state (what a healing rank receives)
        self.epoch = 0
        self.cursor = 0
        self.windows = 0
        self.names: list[str] = []
        warm_up(self.device, self.model)  # before the epoch's clock starts
        self._reset_epoch_numbers()
        # this rank's scalars not yet in the shared name table (rare: a name too long to
        # announce in one window waits for the next)
        self._pending: dict[str, tuple[float, int]] = {}
        self.manager: Any = None
        self.led_last = False  # first participant of the last committed window

    # ---- committed state -------------------------------------------------------------------------

    def _reset_epoch_numbers(self) -> None:
        self.acc = [[0.0] * RANK_FIELDS for _ in range(self.world)]
        self.scal = {n: [0.0, 0.0] for n in self.names}
        self.syncs = 0
        self.sync_ms: list[float] = []
        self.t_epoch = time.time()

    def state_dict(self) -> dict[str, Any]:
        """The committed state, sent to a healing peer (no pickle: see the transport)."""
        out: dict[str, Any] = {
            "model": {
                k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()
            },
            "optimizer": self.optimizer.state_dict(),
            "epoch": self.epoch,
            "cursor": self.cursor,
            "windows": self.windows,
            "names": list(self.names),
            "acc": [list(a) for a in self.acc],
            "scal": [[n, s[0], s[1]] for n, s in self.scal.items()],
            "syncs": self.syncs,
            "sync_ms": list(self.sync_ms),
        }
        if self.outer is not None:
            assert self.global_params is not None
            out["global"] = [g.clone() for g in self.global_params]
            out["outer"] = self.outer.state_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Adopt a peer's committed state (heal)."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch = int(state["epoch"])
        self.cursor = int(state["cursor"])
        self.windows = int(state["windows"])
        self.names = [str(n) for n in state["names"]]
        self.acc = [[float(x) for x in a] for a in state["acc"]]
        self.scal = {str(n): [float(s), float(c)] for n, s, c in state["scal"]}
        self.syncs = int(state["syncs"])
        self.sync_ms = [float(x) for x in state["sync_ms"]]
        if self.outer is not None and "global" in state:
            assert self.global_params is not None
            for g, s in zip(self.global_params, state["global"], strict=True):
                g.copy_(s)
            self.outer.load_state_dict(state["outer"])
        if self.windows > 0:  # not the first quorum's sync of the initial weights
            self.send(("healed", self.rank, self.epoch, self.cursor))

    def _snapshot(self) -> tuple[dict[str, Tensor], dict[str, Any]]:
        model = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return model, copy.deepcopy(self.optimizer.state_dict())

    def _restore(self, snap: tuple[dict[str, Tensor], dict[str, Any]]) -> None:
        self.model.load_state_dict(snap[0])
        self.optimizer.load_state_dict(snap[1])

    # ---- torchft ---------------------------------------------------------------------------------

    def connect(self) -> dict[str, int]:
        """Create this replica's manager (it starts heartbeating); returns the ports it bound."""
        torchft = require_torchft()
        from torchft import manager as tm

        exp = self.payload.exposure
        os.environ["GLOO_SOCKET_IFNAME"] = exp.gloo_ifname
        timeout = timedelta(seconds=float(self.cfg.timeout_s))
        tm.ManagerServer = _bound_manager_server(tm.ManagerServer, exp.host)
        self.store = listen_store(exp.host, 0, timeout_s=float(self.cfg.timeout_s))
        self.transport = StateTransport(exp.host, self.payload.token, timeout)
        self.manager = torchft.Manager(
            pg=torchft.ProcessGroupGloo(timeout=timeout),
            load_state_dict=self.load_state_dict,
            state_dict=self.state_dict,
            min_replica_size=self.payload.opts.min_ranks,
            use_async_quorum=False,
            timeout=timeout,
            quorum_timeout=timeout,
            connect_timeout=timeout,
            rank=0,
            world_size=1,
            store_addr=exp.host,
            store_port=self.store.port,
            lighthouse_addr=self.payload.lighthouse,
            # torchft derives a global rank from the id's trailing digits: keep them distinct
            replica_id=f"flodl_rank_{self.rank}",
            hostname=exp.host,
            checkpoint_transport=self.transport,
            init_sync=True,
        )
        server = self.manager._manager
        manager_port = int(str(server.address()).rsplit(":", 1)[-1].strip("/")) if server else 0
        return {"manager": manager_port, "heal": self.transport.port, "store": self.store.port}

    # ---- the loop --------------------------------------------------------------------------------

    def _set_phase(self, phase: int) -> None:
        self.signals.phase[self.rank] = phase

    def run(self, train_step: Callable[..., Any]) -> None:
        """Train windows until the run's last epoch is committed."""
        epochs = int(self.cfg.num_epochs)  # type: ignore[arg-type]
        while self.epoch < epochs:
            self.window(train_step)
        self._set_phase(FINISHED)

    def window(self, train_step: Callable[..., Any]) -> None:
        """One window (module docstring); returns after its commit or its rollback."""
        snap = self._snapshot()
        self._set_phase(WAITING)
        t_q = time.perf_counter()
        self.manager.start_quorum()
        if self.epoch >= int(self.cfg.num_epochs):  # healed from a peer that had finished
            return
        n = self.manager.num_participants()
        me = self.manager.participating_rank()
        total = min(self.epoch_batches - self.cursor, n * self.anchor)
        counts = split_batches(total, n)
        mine = counts[me] if me is not None else 0
        first = self.cursor + (sum(counts[:me]) if me is not None else 0)
        epoch = self.epoch

        loss_sum, compute_ms, sums, calls = self._train_share(train_step, epoch, first, mine)

        self._set_phase(WAITING)
        t_s = time.perf_counter()
        names = self._agree_names(sums)
        ok = self._average_and_commit(mine, loss_sum, compute_ms, sums, calls, names)
        sync_ms = (time.perf_counter() - t_s) * 1000.0
        if not ok:
            self._restore(snap)
            self.send(("rollback", self.rank, epoch, n, (time.perf_counter() - t_q)))
            return
        self._committed(sums, calls, names, sync_ms, total, leader=me == 0)

    def _committed(
        self,
        sums: dict[str, float],
        calls: dict[str, int],
        names: list[str],
        sync_ms: float,
        total: int,
        *,
        leader: bool,
    ) -> None:
        """Book a committed window: scalars not yet in the agreed table wait for the next
        window, the epoch's cursor advances, and the epoch ends when its batches are done."""
        self._pending = {k: (sums[k], calls[k]) for k in sums if k not in names}
        self.names = names
        self.windows += 1
        self.syncs += 1
        self.sync_ms.append(sync_ms)
        self.cursor += total
        self.led_last = leader
        if self.cursor >= self.epoch_batches:
            self._end_epoch(leader)

    def _train_share(
        self, train_step: Callable[..., Any], epoch: int, first: int, mine: int
    ) -> tuple[float, float, dict[str, float], dict[str, int]]:
        """Train batches ``first .. first + mine - 1`` of the epoch's order; returns the loss
        sum, the compute time (ms) and the recorded scalars (sums, calls), pending ones too."""
        self._set_phase(COMPUTING)
        self.sink.install()
        t0 = time.perf_counter()
        loss_sum = 0.0
        if mine > 0:
            shard = self.loader.shard_range(first * self.bs, (first + mine) * self.bs)
            for batch in shard.epoch(epoch):
                loss_sum += self._step(train_step(self.model, batch))
                self.signals.progress[self.rank] += 1
        compute_ms = (time.perf_counter() - t0) * 1000.0
        self.sink.uninstall()
        sums, calls = self.sink.take()
        for k, v in self._pending.items():
            sums[k] = sums.get(k, 0.0) + v[0]
            calls[k] = calls.get(k, 0) + v[1]
        return loss_sum, compute_ms, sums, calls

    def _step(self, loss: Any) -> float:
        if not isinstance(loss, Tensor) or loss.numel() != 1:
            raise ConfigError(
                f"train_step must return a scalar loss tensor, got {type(loss).__name__}"
            )
        loss.backward()
        if self.cfg.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def _allreduce(self, t: Tensor) -> Tensor:
        from torch.distributed import ReduceOp

        self.manager.allreduce(t, reduce_op=ReduceOp.SUM).wait()
        return t

    def _agree_names(self, sums: dict[str, float]) -> list[str]:
        """The scalar names of this window: the committed table plus every participant's new
        ones (each rank announces its new names as bytes in its own slot of one all-reduce)."""
        new = sorted(k for k in sums if k not in self.names)
        fit: list[str] = []
        for k in new:
            if len(json.dumps([*fit, k]).encode()) <= ANNOUNCE_BYTES:
                fit.append(k)
        slot = torch.zeros(self.world, ANNOUNCE_BYTES, dtype=torch.float64)
        raw = json.dumps(fit).encode() if fit else b""
        if raw:
            slot[self.rank, : len(raw)] = torch.tensor(list(raw), dtype=torch.float64)
        self._allreduce(slot)
        announced: set[str] = set()
        for r in range(self.world):
            row = bytes(int(v) for v in slot[r].round().clamp(0, 255).tolist()).rstrip(b"\0")
            if row:
                with contextlib.suppress(ValueError, UnicodeDecodeError):
                    announced.update(str(x) for x in json.loads(row.decode()))
        return self.names + sorted(announced - set(self.names))

    def _pack(
        self,
        w: float,
        loss_sum: float,
        compute_ms: float,
        sums: dict[str, float],
        calls: dict[str, int],
        names: list[str],
    ) -> tuple[Tensor, Tensor]:
        """The window's two all-reduce buffers: ``flat`` = ``w`` × (parameters, float buffers)
        in float32; ``nums`` (float64) = per-rank ``[batches, loss sum, compute ms]`` in this
        rank's slot, then ``[sum, calls]`` per agreed scalar name, then ``w`` × integer buffers."""
        flat = torch.cat(
            [p.detach().reshape(-1).to("cpu", torch.float32) * w for p in self.params]
            + [b.detach().reshape(-1).to("cpu", torch.float32) * w for b in self.fbufs]
            + [torch.zeros(0)]
        )
        nums = torch.zeros(self.world * RANK_FIELDS + 2 * len(names), dtype=torch.float64)
        nums[self.rank * RANK_FIELDS : (self.rank + 1) * RANK_FIELDS] = torch.tensor(
            [w, loss_sum, compute_ms], dtype=torch.float64
        )
        base = self.world * RANK_FIELDS
        for i, k in enumerate(names):
            if k in sums:
                nums[base + 2 * i] = sums[k]
                nums[base + 2 * i + 1] = calls[k]
        ints = torch.cat(
            [b.detach().reshape(-1).to("cpu", torch.float64) * w for b in self.ibufs]
            + [torch.zeros(0, dtype=torch.float64)]
        )
        return flat, torch.cat([nums, ints])

    @torch.no_grad()
    def _average_and_commit(
        self,
        mine: int,
        loss_sum: float,
        compute_ms: float,
        sums: dict[str, float],
        calls: dict[str, int],
        names: list[str],
    ) -> bool:
        flat, nums = self._pack(float(mine), loss_sum, compute_ms, sums, calls, names)
        base = self.world * RANK_FIELDS
        self._allreduce(flat)
        self._allreduce(nums)
        if not self.manager.should_commit():
            return False
        total = sum(nums[r * RANK_FIELDS].item() for r in range(self.world))
        for r in range(self.world):
            for j in range(RANK_FIELDS):
                self.acc[r][j] += float(nums[r * RANK_FIELDS + j])
        for i, k in enumerate(names):
            s = self.scal.setdefault(k, [0.0, 0.0])
            s[0] += float(nums[base + 2 * i])
            s[1] += float(nums[base + 2 * i + 1])
        if total > 0:
            self._apply(flat / total, nums[base + 2 * len(names) :] / total)
        return True

    @torch.no_grad()
    def _apply(self, flat: Tensor, ints: Tensor) -> None:
        """The committed average becomes the weights: ``flat`` holds the averaged parameters
        then float buffers, ``ints`` the averaged integer buffers (both already divided by the
        window's batch total); parameters pass through the outer optimizer first."""
        sizes = [p.numel() for p in self.params] + [b.numel() for b in self.fbufs]
        chunks = flat.split(sizes)
        averaged = [c.view_as(p) for c, p in zip(chunks, self.params, strict=False)]
        if self.outer is not None:
            assert self.global_params is not None
            self.outer.step(self.global_params, averaged)
            averaged = self.global_params
        for p, a in zip(self.params, averaged, strict=True):
            p.copy_(a.to(p.device, p.dtype))
        for b, c in zip(self.fbufs, chunks[len(self.params) :], strict=True):
            b.copy_(c.view_as(b).to(b.device, b.dtype))
        offset = 0
        for b in self.ibufs:
            k = b.numel()
            b.copy_(ints[offset : offset + k].round().view_as(b).to(b.device, b.dtype))
            offset += k

    # ---- epoch end and result --------------------------------------------------------------------

    def _end_epoch(self, leader: bool) -> None:
        wall = time.time() - self.t_epoch
        ranks = [
            {
                "host": self.host,
                "device": str(self.payload.base.devices[r]),
                "loss_sum": a[1],
                "loss_n": int(a[0]),
                "batches": int(a[0]),
                "compute": a[2] / 1000.0,
                "sync": 0.0,
                "idle": 0.0,
                "wall": wall,
                "sums": {},
                "counts": {},
            }
            for r, a in enumerate(self.acc)
        ]
        eval_value = (
            run_eval(self.model, self.cfg.eval_fn)
            if leader and self.cfg.eval_fn is not None
            else None
        )
        m = combine_ranks(
            self.epoch,
            ranks,
            batch_size=self.bs,
            syncs=self.syncs,
            sync_ms=self.sync_ms,
            eval_value=eval_value,
            anchor=self.anchor,
            lr=float(self.optimizer.param_groups[0]["lr"]),
            counts=None,
        )
        scalars = {k: s[0] / s[1] for k, s in sorted(self.scal.items()) if s[1] > 0}
        m = _with_scalars(m, scalars)
        if leader:
            self.send(("metrics", m))
        self.epoch += 1
        self.cursor = 0
        self._reset_epoch_numbers()

    def fingerprint(self) -> list[float]:
        """``[Σθ, Σ|θ|, Σθ²]`` over every parameter in float64: equal weights, equal prints."""
        flat = torch.cat([p.detach().reshape(-1).to("cpu", torch.float64) for p in self.params])
        return [float(flat.sum()), float(flat.abs().sum()), float((flat * flat).sum())]

    def final_state(self) -> Any:
        from ._handle import state_of

        return state_of(self.model)


def _with_scalars(m: EpochMetrics, scalars: dict[str, float]) -> EpochMetrics:
    from dataclasses import replace

    return replace(m, scalars=scalars)


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:
            os._exit(3)


def elastic_rank_process(
    rank: int,
    payload: ElasticPayload,
    signals: RankSignals,
    q: Any,
    result_dir: str,
    parent_pid: int,
    generation: int,
) -> None:
    """Entry point of a spawned elastic rank (generation 0: started with the run; later: a
    restart, which heals from a living peer before its first window)."""
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    os.environ.setdefault("RUST_LOG", "error")  # torchft logs each quorum at INFO otherwise
    # A peer's death is expected here: torchft reports each one as an ERROR with a traceback;
    # the launcher logs deaths itself.
    for name in ("torchft", "torchft_quorums", "torchft_commits", "torchft_errors"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    host = socket.gethostname()
    code = 0
    engine: ElasticEngine | None = None
    try:
        base = payload.base
        set_threads(base.cfg, torch.device(base.devices[rank]), rank, len(base.devices))
        signals.phase[rank] = STARTING
        engine = ElasticEngine(rank, payload, signals, q.put, result_dir)
        ports = engine.connect()
        q.put(("listen", rank, generation, ports))
        signals.ready[rank] = 1
        if generation == 0:
            _wait_for_peers(signals, len(base.devices), float(base.cfg.timeout_s))
        engine.run(base.train_step)
        q.put(("fingerprint", rank, generation, engine.fingerprint()))
        if engine.led_last:  # first in the last window's quorum: exactly one rank writes
            path = Path(result_dir) / "state.safetensors"
            _save_state(engine.final_state(), path)
            q.put(("final", str(path)))
        q.put(("done", rank, generation))
    except BaseException as e:
        code = 1
        with contextlib.suppress(Exception):
            q.put(("error", rank, host, f"{type(e).__name__}: {e}", traceback.format_exc()))
    with contextlib.suppress(Exception):
        q.close()
        q.join_thread()
    os._exit(code)  # skip gloo / torchft destructors: everything owed was delivered above


def _wait_for_peers(signals: RankSignals, world: int, timeout: float) -> None:
    # Every first-generation rank heartbeats before anyone asks for a quorum, so the first
    # quorum holds them all (the lighthouse waits for every heartbeating replica).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(signals.ready[r] != 0 for r in range(world)):
            return
        time.sleep(0.01)
