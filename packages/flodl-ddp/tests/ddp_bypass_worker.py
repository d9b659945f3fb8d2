"""Rank body of the two-process bypass test (imported by name in spawned children).

Each rank runs every scenario over one gloo group and writes its observations as JSON *before*
teardown (a rare SIGABRT at process-group teardown must not lose them); the parent test compares
them with hand-computed values.
"""

from __future__ import annotations

import traceback
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from rank_harness import write_result
from torch import nn

from flodl_ddp import (
    DdpError,
    all_reduce_buckets,
    all_reduce_gradients,
    broadcast_buckets,
    sync_buffers,
    sync_params,
    verify_replicas,
    weighted_all_reduce_gradients,
)


class Net(nn.Module):
    """Linear(3, 2) (weight (2, 3), bias (2,)), BatchNorm1d(2) buffers, and a parameter the
    forward never uses (its gradient stays None)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.bn = nn.BatchNorm1d(2)
        self.unused = nn.Parameter(torch.zeros(4))


def set_grads(model: Net, rank: int) -> None:
    # rank 0: weight.grad = [[0,1,2],[3,4,5]], bias.grad = [0, 1]
    # rank 1: weight.grad = 10 + [[0,1,2],[3,4,5]], bias.grad = 10 + [0, 1]
    model.lin.weight.grad = torch.arange(6.0).view(2, 3) + 10.0 * rank
    model.lin.bias.grad = torch.arange(2.0) + 10.0 * rank
    model.unused.grad = None


def grads(model: Net) -> dict[str, Any]:
    return {
        "weight": model.lin.weight.grad.tolist(),
        "bias": model.lin.bias.grad.tolist(),
        "unused": None if model.unused.grad is None else model.unused.grad.tolist(),
    }


def scenarios(rank: int) -> dict[str, Any]:
    out: dict[str, Any] = {}

    # Buckets: 4 float tensors + 1 int tensor; 40-byte buckets force several collectives.
    ts = [torch.full((3,), 1.0 + rank), torch.full((2, 2), 4.0 * rank), torch.tensor([7.0 * rank])]
    ts.append(torch.arange(5.0) * (rank + 1))
    ints = torch.tensor([3 + rank, 10 * rank], dtype=torch.int64)
    all_reduce_buckets([*ts, ints], op="avg", bucket_bytes=40)
    out["avg"] = [t.tolist() for t in ts]
    out["avg_int"] = ints.tolist()
    s = [torch.tensor([1.0, 2.0]) * (rank + 1)]
    all_reduce_buckets(s, prescale=0.5)
    out["sum_prescaled"] = s[0].tolist()
    mx = [torch.tensor([float(rank), 5.0 - rank])]
    all_reduce_buckets(mx, op=dist.ReduceOp.MAX)
    out["max"] = mx[0].tolist()
    w = [torch.tensor([1.0, 1.0 / 3.0, 1000.0]) * (rank + 1)]
    all_reduce_buckets(w, op="avg", wire_dtype=torch.bfloat16)
    out["bf16_avg"] = w[0].tolist()
    out["bf16_dtype"] = str(w[0].dtype)
    b = [torch.full((2,), float(rank + 5)), torch.full((3,), float(rank))]
    broadcast_buckets(b, src=1, bucket_bytes=8)
    out["broadcast_from_1"] = [t.tolist() for t in b]

    torch.manual_seed(100 + rank)  # different initial weights per rank
    model = Net()
    model.bn.running_mean.fill_(float(rank + 1))
    model.bn.num_batches_tracked.fill_(5 * rank)
    verify_replicas(model, values=False)  # the same architecture; each rank's own weights
    out["values_before_sync"] = replica_error(model)
    sync_params(model)
    out["params_after_sync"] = [p.tolist() for p in model.parameters()]
    out["buffers_after_sync"] = [b.tolist() for b in model.buffers()]
    out["values_after_sync"] = replica_error(model)
    with torch.no_grad():  # one float32 step (an ulp) in one weight, on rank 1 only
        w = model.lin.weight
        if rank == 1:
            w[1, 2] = torch.nextafter(w[1, 2], torch.tensor(float("inf")))
        out["one_ulp_on_rank_1"] = replica_error(model)
        sync_params(model)
        if rank == 1:
            model.bn.num_batches_tracked += 1  # a buffer differs
        out["buffer_on_rank_1"] = replica_error(model)
        sync_params(model)
    model.bn.running_var.fill_(float(rank + 2))
    sync_buffers(model)
    out["running_var_after_sync_buffers"] = model.bn.running_var.tolist()

    set_grads(model, rank)
    all_reduce_gradients(model)
    out["mean"] = grads(model)

    set_grads(model, rank)
    weighted_all_reduce_gradients(model, 3 if rank == 0 else 1)
    out["weighted_3_1"] = grads(model)

    set_grads(model, rank)
    weighted_all_reduce_gradients(model, 0 if rank == 0 else 2)
    out["weighted_0_2"] = grads(model)

    set_grads(model, rank)
    try:
        weighted_all_reduce_gradients(model, 0)
        out["zero_total"] = "no error"
    except DdpError as e:
        out["zero_total"] = str(e)

    other = nn.Linear(3, 2 + rank)  # rank 1's replica has a different shape
    out["mismatch"] = replica_error(other)
    return out


def replica_error(model: nn.Module) -> Any:
    """``verify_replicas(model)``: ``None`` when it passes, else ``[rank, message]``."""
    try:
        verify_replicas(model)
    except DdpError as e:
        return [e.rank, str(e)]
    return None


def main(rank: int, port: int, world_size: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, world_size + 1, is_master=False)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=20)
    )
    try:
        result: dict[str, Any] = scenarios(rank)
    except BaseException:
        result = {"error": traceback.format_exc()}
    write_result(out_dir, rank, result)
    dist.barrier()  # both files exist before either rank tears down
    dist.destroy_process_group()


def nccl_main(rank: int, port: int, world_size: int, out_dir: str) -> None:
    """The bypass functions over NCCL, rank ``r`` on ``cuda:r`` (needs two GPUs): parameters
    filled with ``r + 1``, gradients ``r + 1``, BatchNorm's running mean ``r``."""
    result: dict[str, Any]
    try:
        device = torch.device(f"cuda:{rank}")
        torch.cuda.set_device(device)
        store = dist.TCPStore("127.0.0.1", port, None, is_master=False)
        dist.init_process_group(
            "nccl", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=60)
        )
        model = Net().to(device)
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(rank + 1.0)
            model.bn.running_mean.fill_(float(rank))
        sync_params(model)
        sync_buffers(model)
        result = {
            "params": sorted({float(v) for p in model.parameters() for v in p.flatten()}),
            "running_mean": model.bn.running_mean.tolist(),
        }
        for key in ("mean", "weighted"):
            for p in (model.lin.weight, model.lin.bias):
                p.grad = torch.full_like(p, rank + 1.0)
            if key == "mean":
                all_reduce_gradients(model)
            else:
                weighted_all_reduce_gradients(model, rank + 1)  # counts 1 and 2
            result[key] = sorted({float(v) for p in (model.lin.weight, model.lin.bias)
                                  for v in p.grad.flatten()})  # fmt: skip
            result[key + "_device"] = str(model.lin.weight.grad.device)
    except BaseException:
        result = {"error": traceback.format_exc()}
    write_result(out_dir, rank, result)
    if dist.is_initialized():
        dist.barrier(device_ids=[rank])  # both files exist before either rank tears down
        dist.destroy_process_group()
