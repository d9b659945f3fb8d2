"""The cooperative tier: the framework sets up, you own the loop inside each rank.

Run the script once per rank (``torchrun --nproc-per-node N``, or a process group of your own;
without either it is a world of one, with a warning). Iterate ``session.epoch(n)`` to its end on
every rank and call ``session.step(loss)`` once per batch: the ranks count batches to know when
to average (a rank that leaves an epoch early makes the others fail, naming it).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from flodl_core.data import as_batch_dataset

from ._comm import Comm, SoloComm
from ._config import DdpConfig
from ._errors import DdpError
from ._handle import TrainedState
from ._metrics import EpochMetrics
from ._options import _callable, _int, _must, check_config, check_world
from ._rank import RankEngine
from ._reduce import LocalReducer
from ._torchrun import group_comm, join_group, torchrun_env
from ._worker import rank_context, static_reducer

logger = logging.getLogger("flodl.ddp")

_SESSIONS = itertools.count()  # every rank makes its sessions in the same order


class DdpSession:
    """One rank of a cooperative run (made by :meth:`Trainer.setup`).

    Args:
        model: this rank's model, already on its device; every rank must build the same
            architecture (checked). Rank 0's initial weights are copied to every rank.
        optim_factory: ``optim_factory(params) -> torch.optim.Optimizer``.
        config: the run's :class:`DdpConfig` (``dataset`` and ``batch_size`` required).
    """

    def __init__(
        self, model: nn.Module, optim_factory: Callable[..., Any], config: DdpConfig
    ) -> None:
        _must("config", lambda c: isinstance(c, DdpConfig), "be a DdpConfig", type)(config)
        _must("model", lambda m: isinstance(m, nn.Module), "be an nn.Module", type)(model)
        _callable("optim_factory")(optim_factory)
        spec = check_config(config.to_trainer_config(), need_epochs=False)
        device = next((p.device for p in model.parameters()), torch.device("cpu"))
        self._created_pg, rank, world = False, 0, 1
        if (dist.is_available() and dist.is_initialized()) or torchrun_env() is not None:
            self._created_pg = join_group(device, spec.timeout_s)  # restart-safe under torchrun
            rank, world = dist.get_rank(), dist.get_world_size()
        else:
            logger.warning(
                "ddp: Trainer.setup found no torchrun environment and no process group: this "
                "script trains as a world of ONE rank. Start it with `torchrun --nproc-per-node "
                "N script.py` (or initialise torch.distributed yourself) for N ranks"
            )
        check_world(spec, world, len(as_batch_dataset(spec.dataset)))
        if world > 1:
            comm: Comm = group_comm(f"session{next(_SESSIONS)}", spec.timeout_s)
            reducer = static_reducer(comm, spec)
            if device.type == "cpu" and spec.threads_per_rank is None:
                torch.set_num_threads(1)
        else:
            comm, reducer = SoloComm(), lambda _a: LocalReducer()
        ctx = rank_context(rank, world, device, comm, reducer)
        self._engine = RankEngine(spec, ctx, model, optim_factory)
        self._closed = False

    @property
    def model(self) -> nn.Module:
        """The model to call in the loop (sync mode: the DDP wrapper, which averages gradients)."""
        return self._engine.forward_model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self._engine.optimizer

    @property
    def rank(self) -> int:
        return self._engine.rank

    @property
    def world_size(self) -> int:
        return self._engine.world

    @property
    def device(self) -> torch.device:
        return self._engine.device

    @property
    def start_epoch(self) -> int:
        """The first epoch to run (after ``resume``, the one after the checkpoint)."""
        return self._engine.next_epoch

    @property
    def metrics(self) -> list[EpochMetrics]:
        """One :class:`EpochMetrics` per finished epoch (identical on every rank but ``eval``)."""
        return list(self._engine.metrics)

    def epoch(self, n: int) -> Iterator[Any]:
        """This rank's batches of epoch ``n`` (iterate to the end on every rank)."""
        if self._closed:
            raise DdpError("the session is closed")
        return self._engine.epoch(_int("epoch", 0)(n))  # checked here: a bad n leaves no epoch

    def step(self, loss: torch.Tensor) -> None:
        """Backward, per-rank clip, optimizer step, zero_grad (once per batch)."""
        self._engine.step(loss)

    def state(self) -> TrainedState:
        """The current model as CPU tensors."""
        return self._engine.final_state()

    def close(self) -> None:
        """Wait for every rank, then release the process group if the session created it."""
        if self._closed:
            return
        self._closed = True
        self._engine.close()
        left = self._engine.left
        if self.world_size > 1 and left is None:
            self._engine.comm.barrier("close")
            self._engine.comm.close()
        if self._created_pg:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        if left is not None:
            raise DdpError(left, rank=self.rank)
