"""Parameter averaging for the cadence and async policies.

One averaging round on rank ``r`` with weight ``w_r = count_r / Σ count`` (its batches in the
window over everyone's):

1. ``θ_avg = Σ_r w_r θ_r`` for parameters, ``b_avg = (1/W) Σ_r b_r`` for buffers (floating
   buffers and integer ones, the latter rounded back), in one all-reduce of a flat buffer that
   carries the pre-scaled parameters and buffers together;
2. the outer optimizer turns the consensus into the new global weights (plain averaging keeps
   ``θ_avg``; SlowMo / DiLoCo step on ``Δ = θ_global − θ_avg``);
3. the rank writes the result back: ``θ_r := θ_global``, or with EASGD (cpu-async)
   ``θ_r := (1 − α) θ_r + α θ_global``;
4. the rank's divergence ``‖θ_pre − θ_post‖ / ‖θ_post‖`` is returned for the convergence guard.

Backends: ``nccl`` reduces copies on the training device (NCCL for CUDA tensors, gloo for CPU
tensors); ``cpu`` reduces CPU copies over gloo, in bfloat16 when ``bf16_wire`` is set (the
weights are pre-scaled in float32, then cast, so only the sum is rounded to 8 mantissa bits).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ._buckets import all_reduce_buckets
from ._modes import Backend


def _is_plain_average(outer: Any) -> bool:
    if outer is None:
        return True
    from ._outer import OuterAvg

    return type(outer) is OuterAvg


class Averager:
    """Averages ``model``'s parameters and buffers with the other ranks (see the module doc).

    Args:
        model: this rank's replica.
        backend: ``Backend.NCCL`` (device tensors) or ``Backend.CPU`` (CPU copies over gloo).
        world_size: number of ranks (1: every round is a no-op that returns divergence 0).
        bf16_wire: cpu backend only: bfloat16 on the wire.
        easgd_alpha: blend factor in (0, 1], ``None`` for a full overwrite.
        outer: an outer optimizer (``None`` or ``OuterAvg``: plain averaging).
    """

    def __init__(
        self,
        model: nn.Module,
        backend: Backend,
        world_size: int,
        *,
        bf16_wire: bool = False,
        easgd_alpha: float | None = None,
        outer: Any = None,
    ) -> None:
        self.params: list[Tensor] = [p for p in model.parameters()]
        self.float_buffers = [b for b in model.buffers() if b.is_floating_point()]
        self.int_buffers = [b for b in model.buffers() if not b.is_floating_point()]
        self.backend = backend
        self.world_size = world_size
        self.wire = torch.bfloat16 if bf16_wire and backend is Backend.CPU else None
        self.alpha = easgd_alpha
        self.outer = None if _is_plain_average(outer) else outer
        self.rounds = 0
        self._sizes = [p.numel() for p in self.params]
        # The global weights the outer optimizer steps on: identical on every rank, since every
        # rank receives the same all-reduced consensus and runs the same deterministic step.
        self.global_params: list[Tensor] | None = None
        if self.outer is not None:
            self.global_params = [self._work_copy(p) for p in self.params]
        # With EASGD the replicas differ after a round; the last consensus is the run's result.
        self.consensus: list[Tensor] | None = None

    def _work_copy(self, t: Tensor) -> Tensor:
        if self.backend is Backend.CPU:
            return t.detach().to("cpu", copy=True)
        return t.detach().clone()

    def _views(self, flat: Tensor) -> list[Tensor]:
        """``flat`` cut into views shaped like the parameters."""
        return [c.view_as(p) for c, p in zip(flat.split(self._sizes), self.params, strict=True)]

    @torch.no_grad()
    def average(self, weight: float) -> float:
        """One round with this rank's weight ``count_r / Σ count``; returns the divergence.

        Every rank must call it in the same round (it is a collective). Parameters travel as one
        flat buffer (one collective instead of one per tensor; gloo and NCCL take any size);
        with ``bf16_wire`` the buffers go in a second, exact float32 collective.
        """
        self.rounds += 1
        if self.world_size == 1:
            return 0.0
        inv = 1.0 / self.world_size
        on_cpu = self.backend is Backend.CPU
        local = torch.cat([p.detach().reshape(-1) for p in self.params])
        if on_cpu and local.device.type != "cpu":
            local = local.to("cpu")
        send = local * float(weight)
        fbuf = [self._work_copy(b).mul_(inv) for b in self.float_buffers]
        if self.wire is None:
            send = torch.cat([send, *(b.reshape(-1).to(send.dtype) for b in fbuf)])
            dist.all_reduce(send)
            avg = send[: local.numel()]
            self._unflat_buffers(send[local.numel() :], fbuf)
        else:
            wire = send.to(self.wire)
            dist.all_reduce(wire)
            avg = wire.to(local.dtype)
            if fbuf:
                all_reduce_buckets(fbuf, op=dist.ReduceOp.SUM)
        for b, t in zip(self.float_buffers, fbuf, strict=True):
            b.copy_(t)
        if self.int_buffers:
            self._average_int_buffers(inv)

        if self.outer is not None:
            assert self.global_params is not None
            self.outer.step(self.global_params, self._views(avg))
            new = torch.cat([g.reshape(-1) for g in self.global_params])
        else:
            new = avg
        if self.alpha is not None and self.alpha < 1.0:
            self.consensus = [t.clone() for t in self._views(new)]
            new = local * (1.0 - self.alpha) + new * self.alpha
        diff = float(torch.linalg.vector_norm(local - new))
        norm = float(torch.linalg.vector_norm(new))
        for p, t in zip(self.params, self._views(new), strict=True):
            p.copy_(t)
        if norm <= 0.0:
            return 0.0 if diff == 0.0 else math.inf
        return diff / norm

    def _unflat_buffers(self, flat: Tensor, fbuf: list[Tensor]) -> None:
        offset = 0
        for t in fbuf:
            n = t.numel()
            t.copy_(flat[offset : offset + n].view_as(t))
            offset += n

    def _average_int_buffers(self, inv: float) -> None:
        # Integer buffers (BatchNorm's num_batches_tracked) are averaged exactly in float64
        # and rounded back; they are small and rare, so a second collective is cheap.
        ibuf = [b.detach().to("cpu", torch.float64).mul_(inv) for b in self.int_buffers]
        if self.backend is Backend.NCCL:
            ibuf = [t.to(self.int_buffers[0].device) for t in ibuf]
        all_reduce_buckets(ibuf, op=dist.ReduceOp.SUM)
        for b, t in zip(self.int_buffers, ibuf, strict=True):
            b.copy_(t.round().to(b.dtype))

    def final_params(self) -> list[Tensor] | None:
        """The consensus to report as the run's result when the replicas differ (EASGD)."""
        return self.consensus

    # ---- checkpoint state -------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rounds": self.rounds}
        if self.global_params is not None:
            out["global"] = [t.detach().to("cpu", copy=True) for t in self.global_params]
        if self.outer is not None:
            out["outer"] = self.outer.state_dict()
        if self.consensus is not None:
            out["consensus"] = [t.detach().to("cpu", copy=True) for t in self.consensus]
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = int(state.get("rounds", 0))
        if self.global_params is not None and "global" in state:
            for t, s in zip(self.global_params, state["global"], strict=True):
                t.copy_(s)
        if self.outer is not None and "outer" in state:
            self.outer.load_state_dict(state["outer"])
        if "consensus" in state:
            self.consensus = [s.clone() for s in state["consensus"]]
