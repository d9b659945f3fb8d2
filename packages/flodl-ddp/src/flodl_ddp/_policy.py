"""When the ranks average: the pieces of the three policies that are not the averaging itself.

- **sync**: gradients are averaged at every batch inside backward, by PyTorch's
  ``DistributedDataParallel`` (bucketed, overlapped with the backward pass) with a comm hook that
  weights each rank's gradient by its share of the step's samples (:func:`wrap_sync`).
- **cadence**: rank ``r`` runs ``counts[r]`` batches (ElChe), then every rank averages.
- **async**: a rank that has run its count marks itself ready in the store and keeps training
  ("overshoot") until every rank is ready or it has run ``max_overshoot`` extra batches; then
  every rank averages, weighted by the batches each actually ran (:class:`Overshoot`).

The automatic ``max_overshoot`` starts at ``min(5, max(2, batches_per_epoch // 100))``, grows by
one after each averaging the convergence guard calls stable, up to the anchor (a rank never
overshoots by more than a window), and falls back to its start value when the guard reports
divergence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ._modes import Backend


@dataclass
class HookState:
    """What the sync comm hook needs: this rank's weight for the current step and the wire."""

    weight: float
    to_cpu: bool
    wire: torch.dtype | None
    bytes_sent: int = 0  # bytes handed to all-reduce so far (bucket sizes on the wire)


def weighted_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: ``g = Σ_r w_r g_r`` with ``w_r`` = rank r's share of the step's samples.

    ``nccl`` backend: the bucket is reduced where it lives. ``cpu`` backend: a CPU copy (in
    ``wire`` dtype when set) is reduced over gloo and copied back.
    """
    buf = bucket.buffer()
    state.bytes_sent += buf.numel() * (state.wire or buf.dtype).itemsize
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
    model: nn.Module, device: torch.device, backend: Backend, bf16_wire: bool, weight: float
) -> tuple[DistributedDataParallel, HookState]:
    """``model`` inside DDP with the weighted hook; set ``state.weight`` before each step."""
    ddp = DistributedDataParallel(
        model,
        device_ids=[device] if device.type == "cuda" else None,
    )
    to_cpu = backend is Backend.CPU and device.type != "cpu"
    wire = torch.bfloat16 if backend is Backend.CPU and bf16_wire else None
    state = HookState(weight=weight, to_cpu=to_cpu, wire=wire)
    ddp.register_comm_hook(state, weighted_hook)
    return ddp, state


def auto_overshoot(batches_per_epoch: int) -> int:
    """The automatic start value of ``max_overshoot`` (§ module doc)."""
    return min(5, max(2, batches_per_epoch // 100))


class Overshoot:
    """The async policy's allowance of extra batches (fixed, or automatic)."""

    def __init__(self, fixed: int | None, batches_per_epoch: int) -> None:
        self.fixed = fixed
        self.start = auto_overshoot(batches_per_epoch) if fixed is None else fixed
        self.current = self.start

    def after_round(self, stable: bool, anchor: int) -> None:
        """Grow by one after a stable round (up to ``anchor``), reset after a divergent one."""
        if self.fixed is not None:
            return
        self.current = min(self.current + 1, max(self.start, anchor)) if stable else self.start

    def state_dict(self) -> dict[str, int]:
        return {"current": self.current, "start": self.start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current = int(state["current"])
        self.start = int(state["start"])
