"""Top-level factories and steps for the elastic tests (spawned ranks import this module by name;
it holds no tests itself)."""

from __future__ import annotations

import os
import time

import torch
from torch import nn

from flodl_core import CheckpointError
from flodl_ddp import record_scalar

IN, HIDDEN = 4, 16
N_SAMPLES = 768
BATCH = 8
STEP_SLEEP_S = 0.006  # per batch: windows last long enough to be interrupted, cores stay free


def make_data(n: int = N_SAMPLES, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """``y = x @ w + 0.05 noise`` plus an id column: x ``(n, 4)``, y ``(n, 1)``, ids ``(n,)``."""
    w = torch.randn(IN, 1, generator=torch.Generator().manual_seed(1234))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, IN, generator=g)
    y = x @ w + 0.05 * torch.randn(n, 1, generator=g)
    return x, y, torch.arange(n, dtype=torch.float64)


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))


def make_adam(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=0.01)


HOLD_ENV = "FLODL_TEST_ELASTIC_HOLD"
HOLD_SLEEP_S = 0.08  # per batch while the hold file exists: the run outlasts a restart


def counting_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """MSE, plus the first three moments of the batch's sample ids as recorded scalars: their
    committed totals over an epoch identify the multiset of ids trained. While the file named
    by ``$FLODL_TEST_ELASTIC_HOLD`` exists, each batch takes longer (the test's pace control)."""
    hold = os.environ.get(HOLD_ENV)
    time.sleep(HOLD_SLEEP_S if hold and os.path.exists(hold) else STEP_SLEEP_S)
    ids = batch[2]
    record_scalar("id1", float(ids.sum()))
    record_scalar("id2", float((ids**2).sum()))
    record_scalar("id3", float((ids**3).sum()))
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def mse(state, x: torch.Tensor, y: torch.Tensor) -> float:
    m = make_model()
    state.load_into(m)
    with torch.no_grad():
        return float(nn.functional.mse_loss(m(x), y))


def sleepy_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """MSE after ~8 ms asleep: each batch costs the same wall time on a busy machine (the
    slowdown hook then makes the slowed rank's batches take twice as long)."""
    time.sleep(0.008)
    return nn.functional.mse_loss(model(batch[0]), batch[1])


FAIL_HEAL_ENV = "FLODL_TEST_ELASTIC_FAIL_HEAL"


def _fail_first_heal(marker: str) -> None:
    """This process's first heal past the initial sync fails, as a lost link would (and says so
    in the file ``marker``): its window is void on this rank only, and its peers, waiting in that
    window's collectives, must not stall until the run's timeout."""
    from flodl_ddp._elastic_transport import StateTransport

    real = StateTransport.recv_checkpoint

    def recv(self, src_rank: int, metadata: str, step: int, timeout) -> object:
        if step > 0 and not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(f"heal at step {step} failed\n")
            raise CheckpointError("the test's heal failure")
        return real(self, src_rank, metadata, step, timeout)

    StateTransport.recv_checkpoint = recv


if os.environ.get(FAIL_HEAL_ENV):  # set by the test for the ranks it starts, never for itself
    _fail_first_heal(os.environ[FAIL_HEAL_ENV])
