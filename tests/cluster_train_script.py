"""A tiny regression trained by ``Trainer`` under ``fdl @cluster`` (one rank per "host").

Environment: ``EPOCHS`` (default 3), ``STEP_SLEEP`` (seconds per batch, default 0), ``TMO`` (the
run's collective timeout, default 20 s). Prints ``epoch N loss L`` per epoch and ``done``.
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch import nn

from flodl_ddp import Trainer


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))


def make_sgd(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.05)


def step(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    time.sleep(float(os.environ.get("STEP_SLEEP", "0")))
    return nn.functional.mse_loss(model(batch[0]), batch[1])


def main() -> None:
    # The run token reached this rank (so the Trainer ran the admission handshake).
    print(f"token length {len(os.environ.get('FLODL_CLUSTER_TOKEN', ''))}", flush=True)
    w = torch.randn(4, 1, generator=torch.Generator().manual_seed(1))
    x = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
    y = x @ w  # x (256, 4), y (256, 1)
    handle = (
        Trainer.builder(make_model, make_sgd, step)
        .dataset((x, y))
        .batch_size(16)
        .num_epochs(int(os.environ.get("EPOCHS", "3")))
        .mode("cpu-cadence")
        .timeout(float(os.environ.get("TMO", "20")))
        .run()
    )
    while (m := handle.next_metrics()) is not None:
        print(f"epoch {m.epoch} loss {m.avg_loss:.6f}", flush=True)
    handle.join()
    print("done", flush=True)
    sys.stdout.flush()
    os._exit(0)  # skip gloo teardown: it can abort after the work is done


if __name__ == "__main__":
    main()
