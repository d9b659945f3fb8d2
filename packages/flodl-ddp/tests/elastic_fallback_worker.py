"""The portable fallback, run as a torchrun script (it holds no tests itself).

``torchrun --max-restarts 1`` starts two ranks; on the first attempt rank 1 is SIGKILLed in the
middle of epoch 2 (unless ``FLODL_TEST_NO_KILL`` is set: the uninterrupted reference). torchrun
tears the group down and starts it again; the script sees the checkpoint folder and resumes from
the last epoch written (epoch 1). flodl creates the process group itself, as a user's script
would let it. Rank 0 writes what it found, and the trained weights, to ``argv[1]``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import torch
from torch import nn

EPOCHS = 4
KILL_AT_BATCH = 2 * 16 + 5  # rank 1's batches: 16 per epoch; this one is in epoch 2

_batches = {"n": 0}


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))


def make_adam(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=0.01)


def dying_step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """MSE; on torchrun's first attempt rank 1 kills itself at KILL_AT_BATCH."""
    _batches["n"] += 1
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    kill = first_attempt and not os.environ.get("FLODL_TEST_NO_KILL")
    if kill and os.environ["RANK"] == "1" and _batches["n"] == KILL_AT_BATCH:
        os.kill(os.getpid(), signal.SIGKILL)
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def main(out: str, ckpt: str) -> None:
    from flodl_ddp import Trainer

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=g)
    y = x.sum(1, keepdim=True) + 0.05 * torch.randn(256, 1, generator=g)
    b = (
        Trainer.builder(make_model, make_adam, dying_step)
        .dataset((x, y))
        .batch_size(8)
        .num_epochs(EPOCHS)
        .mode("cpu-sync")
        .timeout(60)
        .checkpoint_every(1, ckpt)
    )
    resumed_from = None
    if (Path(ckpt) / "latest.json").exists():  # a restart: carry on from the last checkpoint
        resumed_from = json.loads((Path(ckpt) / "latest.json").read_text())["epoch"]
        b = b.resume(ckpt)
    h = b.run()
    state = h.join(timeout=120)
    if os.environ["RANK"] == "0":
        result = {
            "restart_count": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
            "resumed_from": resumed_from,
            "epochs_run": [m.epoch for m in h.history],
            "params": {k: v.flatten().tolist() for k, v in state.params.items()},
        }
        tmp = out + ".tmp"
        Path(tmp).write_text(json.dumps(result))
        os.replace(tmp, out)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
