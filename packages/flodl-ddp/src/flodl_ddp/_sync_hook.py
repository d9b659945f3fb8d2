"""The sync policy's step: gradients averaged at every batch inside backward, by PyTorch's
``DistributedDataParallel`` (bucketed, overlapped with the backward pass): DDP's own mean, or a
comm hook that weights each rank's gradient and carries the ``cpu`` backend's copies.
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
    """How the sync step reduces gradients: ``weight`` (this rank's share of the step's
    samples), ``to_cpu`` (reduce a CPU copy: ``cpu`` backend on an accelerator), ``wire`` (the
    dtype on the wire, ``None``: the gradients'), ``step_bytes`` (handed to all-reduce per step),
    ``native`` (DDP's own reduction runs, no Python hook)."""

    weight: float
    to_cpu: bool
    wire: torch.dtype | None
    step_bytes: int = 0
    native: bool = False


def weighted_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: ``g = Σ_r w_r g_r``, the bucket reduced where it lives, or (``cpu``
    backend) a CPU copy in the ``wire`` dtype reduced over gloo and copied back."""
    buf = bucket.buffer()
    if not state.to_cpu and state.wire is None:
        buf.mul_(state.weight)
        fut = dist.all_reduce(buf, async_op=True).get_future()  # type: ignore[union-attr]
        return fut.then(lambda f: f.value()[0])
    send = (buf * state.weight).to(device="cpu", dtype=state.wire or buf.dtype)
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
    unused: bool = False,
) -> tuple[DistributedDataParallel, HookState]:
    """``model`` inside DDP, reducing ``Σ_r w_r g_r``: the plain mean (``weight=None``, what the
    engine's equal batches need), or ``w_r = weight`` on this rank (every rank alike: all
    ``None`` or all a number). The plain mean on the training device registers no hook (DDP
    divides while it fills its buckets); the gradients are views of the buckets. ``unused``: DDP's
    ``find_unused_parameters``."""
    # gradient_as_bucket_view saves the copy back after the all-reduce and the gradients' memory
    ids = [device] if device.type == "cuda" else None
    ddp = DistributedDataParallel(
        model, ids, gradient_as_bucket_view=True, find_unused_parameters=unused
    )
    to_cpu = backend is Backend.CPU and device.type != "cpu"
    wire = torch.bfloat16 if backend is Backend.CPU and bf16_wire else None
    grads = [p for p in model.parameters() if p.requires_grad]
    w = 1.0 / dist.get_world_size() if weight is None else weight
    step_bytes = sum(p.numel() * _wire(p, wire).itemsize for p in grads)
    state = HookState(w, to_cpu, wire, step_bytes, weight is None and not to_cpu and wire is None)
    if not state.native:
        ddp.register_comm_hook(state, weighted_hook)
    return ddp, state
