"""The sync policy's step: gradients averaged at every batch inside backward.

PyTorch's ``DistributedDataParallel`` does it (bucketed, overlapped with the backward pass):
DDP's own mean, or a comm hook that weights each rank's gradient by its share of the step's
samples and carries the ``cpu`` backend's copies (:func:`wrap_sync`). The cadence and async
policies average parameters instead (:mod:`flodl_ddp._rounds`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ._buckets import _wire
from ._modes import Backend


@dataclass
class HookState:
    """How the sync step reduces gradients: this rank's weight and the wire.

    Attributes:
        weight: this rank's share of the step's samples (``1 / world`` for the plain mean).
        to_cpu: reduce a CPU copy (``cpu`` backend on an accelerator).
        wire: the dtype on the wire (``bfloat16`` with ``bf16_wire``), ``None`` for the gradients'.
        step_bytes: bytes handed to all-reduce per step (every bucket once).
        native: DDP's own reduction runs (no Python hook), see :func:`wrap_sync`.
    """

    weight: float
    to_cpu: bool
    wire: torch.dtype | None
    step_bytes: int = 0
    native: bool = False


def weighted_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: ``g = Σ_r w_r g_r`` with ``w_r`` = rank r's share of the step's samples.

    ``nccl`` backend: the bucket is reduced where it lives. ``cpu`` backend: a CPU copy (in
    ``wire`` dtype when set) is reduced over gloo and copied back.
    """
    buf = bucket.buffer()
    if not state.to_cpu and state.wire is None:
        buf.mul_(state.weight)
        fut = dist.all_reduce(buf, async_op=True).get_future()  # type: ignore[union-attr]
        return fut.then(lambda f: f.value()[0])
    wire = state.wire or buf.dtype
    send = (buf * state.weight).to(device="cpu", dtype=wire)
    fut = dist.all_reduce(send, async_op=True).get_future()  # type: ignore[union-attr]

    def back(f: torch.futures.Future[Any]) -> torch.Tensor:
        buf.copy_(f.value()[0])
        return buf

    return fut.then(back)


# DDP checks the hook's annotations at registration; with postponed annotations they are strings.
weighted_hook.__annotations__.update(
    {"state": HookState, "bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}
)


def wrap_sync(
    model: nn.Module,
    device: torch.device,
    backend: Backend,
    bf16_wire: bool,
    weight: float | None = None,
) -> tuple[DistributedDataParallel, HookState]:
    """``model`` inside DDP, reducing ``Σ_r w_r g_r``: the plain mean (``weight=None``, what
    the engine's equal batches need), or with ``w_r = weight`` on this rank.

    The plain mean on the training device (``nccl`` backend or a CPU device, no ``bf16_wire``)
    registers no comm hook: DDP's own reduction divides while it copies each gradient into its
    bucket, where a hook has to scale the bucket in a pass of its own and call back into Python
    per bucket (about 5 % of a 25 ms step of a 1.7 M-parameter MLP on 2 CPU ranks, measured by
    ``benchmarks/ddp_sync_step.py``). Every rank must pass ``weight`` alike (all ``None`` or all
    a number), so all of them reduce the same way. The gradients are views of the buckets
    (``gradient_as_bucket_view``), which saves the copy back after the all-reduce and the
    gradients' own memory.
    """
    ddp = DistributedDataParallel(
        model,
        device_ids=[device] if device.type == "cuda" else None,
        gradient_as_bucket_view=True,
    )
    to_cpu = backend is Backend.CPU and device.type != "cpu"
    wire = torch.bfloat16 if backend is Backend.CPU and bf16_wire else None
    step_bytes = sum(
        p.numel() * _wire(p, wire).itemsize for p in model.parameters() if p.requires_grad
    )
    native = weight is None and not to_cpu and wire is None
    state = HookState(
        weight=1.0 / dist.get_world_size() if weight is None else weight,
        to_cpu=to_cpu,
        wire=wire,
        step_bytes=step_bytes,
        native=native,
    )
    if not native:
        ddp.register_comm_hook(state, weighted_hook)
    return ddp, state
