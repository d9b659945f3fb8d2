"""EASGD's blend in :class:`flodl_ddp._average.Averager`, ranks as threads over shared memory.

``W := (1 - a) W + a W_avg`` with ``a != 0.5``: a blend with its two sides swapped gives the
same numbers at ``a = 0.5`` only. (The gloo path is checked over spawned ranks in
``test_cooperative_multiprocess.py``.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from flodl_ddp._average import Averager
from flodl_ddp._comm import Comm
from flodl_ddp._reduce import SharedReducer
from flodl_ddp._shm import SharedSlots

sys.path.insert(0, str(Path(__file__).parent))
from rank_harness import thread_ranks


@pytest.mark.parametrize("alpha", [0.3, 0.8])
def test_easgd_keeps_one_minus_alpha_of_each_replica(alpha: float) -> None:
    """Rank r of 3 holds r + 1 in every parameter and ran r + 1 batches: W_avg = 14 / 6."""
    world = 3
    weights = [(r + 1) / 6 for r in range(world)]

    def body(comm: Comm) -> dict[str, list[float]]:
        model = nn.Linear(3, 2)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(comm.rank + 1.0)
        averager = Averager(model, on_host=True, easgd_alpha=alpha)
        slots = SharedSlots.open(comm, averager.specs(), eligible=True)
        assert slots is not None
        averager.reducer = SharedReducer(slots, comm.rank)
        averager.stage()
        comm.barrier()  # stands in for the round's arrival exchange
        averager.average(weights, range(world), comm.rank)
        comm.barrier()
        consensus = averager.final_params()
        assert consensus is not None
        return {
            "weight": model.weight.flatten().tolist(),
            "consensus": consensus[0].flatten().tolist(),
        }

    avg = 14 / 6
    for r, got in enumerate(thread_ranks(world, body)):
        want = (1 - alpha) * (r + 1) + alpha * avg
        assert got["weight"] == pytest.approx([want] * 6, abs=1e-6), r
        assert got["consensus"] == pytest.approx([avg] * 6, abs=1e-6)
