"""The Trainer on CUDA devices, for ``test_cuda.py``: one JSON object on the path in ``argv[1]``.

It runs in a fresh interpreter so that the test can tell whether launching ranks on a GPU
initialised CUDA in the launching process (it must not: a parent holding a CUDA context breaks
forked helpers and pins memory on device 0). Every run records its outcome or its traceback, so
one failure does not hide the others:

- ``solo_cpu``: the reference, one CPU device in this process;
- ``gpu_cpu_cadence`` / ``gpu_cpu_async``: a GPU rank and a CPU rank training together (the
  heterogeneous pair ElChe is for; the cpu backend averages CPU copies);
- ``one_gpu_two_ranks``: two ranks on one GPU, cpu-cadence;
- ``cuda_solo``: one GPU in this process (last: it initialises CUDA here);
- with two GPUs or more, ``nccl-sync``, ``nccl-cadence``, ``nccl-async`` and ``cpu-sync`` on
  ``cuda:0`` and ``cuda:1``.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any

import torch
from ddp_trainer_fixtures import fp16_step, make_data, make_model, mse_step, regression_builder

from flodl_core import atomic_write, detect_gpus

EPOCHS = 6
TIMEOUT_S = 180.0


def _held_out(state: Any) -> float:
    m = make_model()
    state.load_into(m)
    x, y = make_data(256, seed=1)
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(m(x), y))


def train(devices: list[str], mode: str | None, fp16: bool = False) -> dict[str, Any]:
    """One run of the fixtures' regression task (``fp16``: float16 autocast, loss scaling);
    what the test checks about it."""
    try:
        x, y = make_data(512, seed=0)
        b = regression_builder(x, y, EPOCHS, fp16_step if fp16 else mse_step).devices(devices)
        b = b.grad_scaler(fp16)
        if mode is not None:
            b = b.mode(mode)
        handle = b.run()
        metrics = []
        while (m := handle.next_metrics(timeout=TIMEOUT_S)) is not None:
            metrics.append(m)
        state = handle.join(timeout=TIMEOUT_S)
        last = metrics[-1]
        return {
            "eval": _held_out(state),
            "losses": [m.avg_loss for m in metrics],
            "state_devices": sorted({str(t.device) for t in state.state_dict().values()}),
            "world": handle.world_size,
            "devices": list(handle.devices),
            "batch_share": list(last.per_rank_batch_share),
            "rank_batches": [r.batches for r in last.per_rank],
            "syncs": last.syncs,
            "peak_memory": [r.peak_memory_bytes for r in last.per_rank],
        }
    except Exception:
        return {"error": traceback.format_exc()}


def main(path: str) -> None:
    gpus = len(detect_gpus())  # nvidia-smi: no CUDA context in this process
    out: dict[str, Any] = {"gpus": gpus}
    out["solo_cpu"] = train(["cpu"], None)
    out["gpu_cpu_cadence"] = train(["cuda:0", "cpu"], "cpu-cadence")
    out["gpu_cpu_async"] = train(["cuda:0", "cpu"], "cpu-async")
    out["one_gpu_two_ranks"] = train(["cuda:0", "cuda:0"], "cpu-cadence")
    out["gpu_cpu_fp16"] = train(["cuda:0", "cpu"], "cpu-cadence", fp16=True)
    out["parent_initialised_cuda"] = torch.cuda.is_initialized()
    if gpus >= 2:
        for mode in ("nccl-sync", "nccl-cadence", "nccl-async", "cpu-sync"):
            out[mode] = train(["cuda:0", "cuda:1"], mode)
    out["cuda_solo"] = train(["cuda:0"], None)
    atomic_write(path, json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
