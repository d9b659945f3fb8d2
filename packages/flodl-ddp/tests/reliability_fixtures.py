"""Top-level factories, steps and rank bodies for the reliability tests of distributed runs
(checkpoints of a large model, failures blamed on the right rank, the run's store, the
cooperative tier). Spawned ranks import this module by name (the tests put its folder on
``sys.path``); it holds no tests itself.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist
from rank_harness import write_result
from torch import nn

IN = 4
WIDE = 2_000_000  # Linear(4, WIDE) + Linear(WIDE, 1): 12 M parameters (48 MB of float32)
MARK_ENV = "FLODL_TEST_MARK_DIR"
GATE_ENV = "FLODL_TEST_GATE"


def make_data(n: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``y = x @ w + 0.05 noise`` plus an id column: x ``(n, 4)``, y ``(n, 1)``, ids ``(n,)``."""
    w = torch.randn(IN, 1, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    y = x @ w + 0.05 * torch.randn(n, 1, generator=g)
    return x, y, torch.arange(n)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(IN, 16), nn.Tanh(), nn.Linear(16, 1))


def make_wide_model() -> nn.Module:
    """A model past 10 M parameters whose step is still cheap: its Adam state (two more copies)
    is far past what one store value may hold (8 MiB)."""
    return nn.Sequential(nn.Linear(IN, WIDE), nn.Tanh(), nn.Linear(WIDE, 1))


def make_adam(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)


def make_sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05)


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def mse(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def gated_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """MSE; while the checkpoint folder named by ``$FLODL_TEST_GATE`` holds a ``latest.json``
    and no ``go`` file sits beside it, wait (the test copies the checkpoint in between)."""
    folder = os.environ.get(GATE_ENV)
    if folder and os.path.exists(os.path.join(folder, "latest.json")):
        go = folder + ".go"
        deadline = time.monotonic() + 60.0
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
    return mse(model, batch)


def marked_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """MSE after 20 ms asleep (the run lasts long enough to be disturbed, the cores stay free);
    each rank's first batch leaves a file ``rank<r>`` in ``$FLODL_TEST_MARK_DIR``."""
    folder = os.environ.get(MARK_ENV)
    if folder:
        mark = os.path.join(folder, f"rank{_rank()}")
        if not os.path.exists(mark):
            with open(mark, "w") as f:
                f.write(str(os.getpid()))
    time.sleep(0.02)
    return mse(model, batch)


# ---- ranks started directly (torchrun's environment, not through Trainer.run) --------------------


def _join_group(rank: int, world: int, port: int) -> None:
    from datetime import timedelta

    torch.set_num_threads(1)
    os.environ.update(
        RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1"
    )
    store = dist.TCPStore("127.0.0.1", port, None, False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)


EASGD_ALPHA = 0.3


def _easgd_rounds(rank: int, world: int) -> dict[str, Any]:
    """EASGD with ``alpha = 0.3`` over gloo and over shared memory: rank ``r`` holds ``r + 1``
    in every parameter and ran ``r + 1`` batches."""
    from torch.distributed.distributed_c10d import _get_default_store

    from flodl_ddp._average import Averager
    from flodl_ddp._comm import StoreComm
    from flodl_ddp._reduce import GroupReducer, SharedReducer
    from flodl_ddp._shm import SharedSlots

    comm = StoreComm(dist.PrefixStore("easgd", _get_default_store()), rank, world)
    counts = [r + 1 for r in range(world)]
    weights = [c / sum(counts) for c in counts]
    out: dict[str, Any] = {}
    for name in ("gloo", "shm"):
        model = nn.Linear(3, 2)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(rank + 1.0)
        averager = Averager(model, on_host=True, easgd_alpha=EASGD_ALPHA)
        slots = SharedSlots.open(comm, averager.specs(), True) if name == "shm" else None
        averager.reducer = SharedReducer(slots, rank) if slots else GroupReducer()
        averager.stage()
        comm.barrier()  # stands in for the round's arrival exchange
        averager.average(weights, range(world), rank)
        comm.barrier()
        consensus = averager.final_params()
        out[name] = {
            "shared": slots is not None,
            "weight": model.weight.flatten().tolist(),
            "bias": model.bias.tolist(),
            "consensus": None if consensus is None else consensus[0].flatten().tolist(),
        }
    return out


def _leave_early(rank: int, x: torch.Tensor, y: torch.Tensor, mode: str) -> dict[str, Any]:
    """The cooperative tier in ``mode``: rank 1 breaks out of ``session.epoch(0)`` after two
    batches; what each rank then sees (the error text and type of each call)."""
    from flodl_ddp import DdpConfig, DdpError, Trainer
    from flodl_ddp._errors import PeerError

    cfg = DdpConfig(dataset=(x, y), batch_size=8, mode=mode, anchor=4, timeout_s=20.0)
    session = Trainer.setup(make_model(), make_sgd, cfg)
    out: dict[str, Any] = {"calls": []}

    def record(call: str, e: BaseException | None) -> None:
        out["calls"].append(
            {
                "call": call,
                "error": None if e is None else str(e),
                "ddp": isinstance(e, DdpError),
                "peer": isinstance(e, PeerError),
                "type": None if e is None else type(e).__name__,
            }
        )

    t = time.monotonic()
    try:
        for i, batch in enumerate(session.epoch(0)):
            session.step(nn.functional.mse_loss(session.model(batch[0]), batch[1]))
            if rank == 1 and i == 1:
                break
        record("epoch0", None)
    except Exception as e:
        record("epoch0", e)
    out["epoch0_s"] = time.monotonic() - t
    try:
        for batch in session.epoch(1):
            session.step(nn.functional.mse_loss(session.model(batch[0]), batch[1]))
        record("epoch1", None)
    except Exception as e:
        record("epoch1", e)
    try:
        session.close()
        record("close", None)
    except Exception as e:
        record("close", e)
    return out


def cooperative_worker(rank: int, port: int, world: int, out_dir: str) -> None:
    """One rank started like torchrun's: EASGD rounds by hand, then the cooperative tier with
    a rank that leaves an epoch early, in cadence, then in sync (last: the rank that left ends
    its process, which is what closes the gradient exchange the other waits in). Results are
    written before teardown."""
    results: dict[str, Any] = {}
    try:
        _join_group(rank, world, port)
        results["easgd"] = _easgd_rounds(rank, world)
        write_result(out_dir, rank, results)
        x, y, _ = make_data(256)
        for mode in ("cpu-cadence", "cpu-sync"):
            results[mode] = _leave_early(rank, x, y, mode)
            write_result(out_dir, rank, results)
    except Exception:
        results["error"] = traceback.format_exc()
    write_result(out_dir, rank, results)
