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

Same host: after :meth:`Averager.share_memory`, a round whose buffer lives in host memory does
not call gloo at all. Each rank copies its tensors into its shared slot (:meth:`Averager.stage`,
before the round's arrival exchange) and then sums every slot with every rank's weight itself
(see :mod:`flodl_ddp._shm`): the same sum, in full precision, 3-7x faster on a 2-core host.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ._buckets import all_reduce_buckets
from ._comm import Comm
from ._modes import Backend
from ._shm import SharedSlots


def _scaled_into(out: Tensor, src: Tensor, factor: float) -> None:
    """``out := factor · src`` in one pass when ``src`` is on ``out``'s device, else through a
    copy (a CUDA parameter into the cpu backend's host buffer)."""
    if src.device == out.device and src.dtype == out.dtype:
        torch.mul(src, factor, out=out)
    else:
        out.copy_(src).mul_(factor)


def _norm(tensors: list[Tensor]) -> float:
    """The 2-norm of all ``tensors`` together, accumulated in float64."""
    if not tensors:
        return 0.0
    parts = torch._foreach_norm(tensors)
    return math.sqrt(sum(float(x) ** 2 for x in parts))


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
        self._flat: Tensor | None = None
        self._slots: SharedSlots | None = None
        self._rank = 0  # this rank's slot (set by share_memory)
        self.bytes_sent = 0
        """Bytes this rank handed to all-reduce (tensor sizes on the wire) or wrote to its shared
        slot so far."""

    def _work_copy(self, t: Tensor) -> Tensor:
        if self.backend is Backend.CPU:
            return t.detach().to("cpu", copy=True)
        return t.detach().clone()

    def _views(self, flat: Tensor) -> list[Tensor]:
        """``flat`` cut into views shaped like the parameters."""
        return [c.view_as(p) for c, p in zip(flat.split(self._sizes), self.params, strict=True)]

    def _flat_buffer(self) -> Tensor:
        """The send buffer, allocated once: ``[w · θ_r (all parameters) | b_r / W (float
        buffers)]`` on the collective's device, in the parameters' promoted dtype."""
        if self._flat is None:
            dtype = self.params[0].dtype
            for p in self.params[1:]:
                dtype = torch.promote_types(dtype, p.dtype)
            device = "cpu" if self.backend is Backend.CPU else self.params[0].device
            n = sum(self._sizes) + sum(b.numel() for b in self.float_buffers)
            self._flat = torch.empty(n, dtype=dtype, device=device)
        return self._flat

    def _buffer_views(self, flat: Tensor) -> list[Tensor]:
        """The float buffers' part of a flat buffer, cut into views shaped like them."""
        n_params = sum(self._sizes)
        sizes = [b.numel() for b in self.float_buffers]
        return [
            c.view_as(b)
            for c, b in zip(flat[n_params:].split(sizes), self.float_buffers, strict=True)
        ]

    # ---- same-host shared memory ----------------------------------------------------------

    def share_memory(self, comm: Comm) -> bool:
        """Average through shared memory from now on, when every rank can (see the module doc).

        A collective: every rank calls it at the same point. Only a buffer in host memory
        without ``bf16_wire`` qualifies (the bf16 wire exists to halve network bytes; a
        memory copy gains nothing from it). Returns whether the ranks share memory.
        """
        if self.world_size == 1:
            return False
        flat = self._flat_buffer()
        n_ints = sum(b.numel() for b in self.int_buffers)
        specs = [(flat.numel(), flat.dtype), (n_ints, torch.float64)]
        eligible = flat.device.type == "cpu" and self.wire is None
        self._rank = comm.rank
        self._slots = SharedSlots.open(comm, specs, eligible)
        return self._slots is not None

    @property
    def shared(self) -> bool:
        """Whether rounds go through shared memory (:meth:`share_memory` succeeded)."""
        return self._slots is not None

    @torch.no_grad()
    def stage(self) -> None:
        """Copy this rank's parameters and buffers into its shared slot (no-op without shared
        memory). Call it before the round's arrival exchange: that exchange is what tells the
        other ranks the slot is written."""
        if self._slots is None:
            return
        flat, ints = self._slots.slots[self._rank]
        n_params = sum(self._sizes)
        for p, v in zip(self.params, self._views(flat[:n_params]), strict=True):
            v.copy_(p.detach())
        for b, v in zip(self.float_buffers, self._buffer_views(flat), strict=True):
            v.copy_(b)
        if self.int_buffers:
            torch.cat(
                [b.detach().reshape(-1).to("cpu", torch.float64) for b in self.int_buffers],
                out=ints,
            )
        self.bytes_sent += flat.numel() * flat.element_size() + ints.numel() * 8

    def _reduce_shared(self, weights: Sequence[float]) -> None:
        """``flat := Σ_r w_r θ_r | (1/W) Σ_r b_r`` from every rank's slot, summed in rank order,
        so every rank computes the same bits."""
        assert self._slots is not None
        flat = self._flat_buffer()
        n_params = sum(self._sizes)
        inv = 1.0 / self.world_size
        params, bufs = flat[:n_params], flat[n_params:]
        # One pass per slot: the first scaled into place, the others added with their weight
        # as the multiplier (no scratch copy of the model; the slots are cold in cache after a
        # window of training, so each pass over them costs about a millisecond per 7 MB).
        for r, (slot, _) in enumerate(self._slots.slots):
            if r == 0:
                torch.mul(slot[:n_params], float(weights[0]), out=params)
                torch.mul(slot[n_params:], inv, out=bufs)
            else:
                params.add_(slot[:n_params], alpha=float(weights[r]))
                bufs.add_(slot[n_params:], alpha=inv)
        if self.int_buffers:
            total = torch.zeros_like(self._slots.slots[0][1])
            for _, ints in self._slots.slots:
                total.add_(ints * inv)
            self._set_int_buffers(total.split([b.numel() for b in self.int_buffers]))

    @torch.no_grad()
    def average(self, weight: float, weights: Sequence[float] | None = None) -> float:
        """One round with this rank's weight ``count_r / Σ count``; returns the divergence.

        Every rank must call it in the same round (it is a collective). Parameters and float
        buffers travel in one flat buffer (one collective instead of one per tensor; gloo and
        NCCL take any size), filled and read back in place; with ``bf16_wire`` the parameters
        go cast and the buffers in a second, exact collective. With shared memory (after
        :meth:`stage` on every rank) ``weights`` must give every rank's weight.
        """
        self.rounds += 1
        if self.world_size == 1:
            return 0.0
        inv = 1.0 / self.world_size
        flat = self._flat_buffer()
        n_params = sum(self._sizes)
        avg = self._views(flat[:n_params])
        bufs = self._buffer_views(flat)
        if self._slots is not None:
            if weights is None or len(weights) != self.world_size:
                raise ValueError("shared-memory averaging needs every rank's weight")
            self._reduce_shared(weights)
            for b, v in zip(self.float_buffers, bufs, strict=True):
                b.copy_(v)
            return self._write_back(avg)
        for p, v in zip(self.params, avg, strict=True):
            _scaled_into(v, p.detach(), float(weight))
        for b, v in zip(self.float_buffers, bufs, strict=True):
            _scaled_into(v, b, inv)
        if self.wire is None:
            dist.all_reduce(flat)
            self.bytes_sent += flat.numel() * flat.element_size()
        else:
            wire = flat[:n_params].to(self.wire)
            dist.all_reduce(wire)
            flat[:n_params].copy_(wire)
            self.bytes_sent += wire.numel() * wire.element_size()
            if bufs:
                dist.all_reduce(flat[n_params:])
                self.bytes_sent += (flat.numel() - n_params) * flat.element_size()
        for b, v in zip(self.float_buffers, bufs, strict=True):
            b.copy_(v)
        if self.int_buffers:
            self._average_int_buffers(inv)
        return self._write_back(avg)

    def _write_back(self, avg: list[Tensor]) -> float:
        """The consensus ``avg`` through the outer optimizer and EASGD into the replica;
        returns the divergence."""
        new = avg
        if self.outer is not None:
            assert self.global_params is not None
            self.outer.step(self.global_params, avg)
            new = self.global_params
        local = [p.detach() for p in self.params]
        if new[0].device != local[0].device:
            new = [t.to(local[0].device) for t in new]
        if self.alpha is not None and self.alpha < 1.0:
            self.consensus = [t.clone() for t in new]
            new = [torch.lerp(p, t, self.alpha) for p, t in zip(local, new, strict=True)]
        # The difference is taken in place: the replica is overwritten with `new` right after,
        # and a model-sized temporary would cost fresh pages every round.
        torch._foreach_sub_(local, new)
        diff = _norm(local)
        norm = _norm(new)
        torch._foreach_copy_(local, new)
        if norm <= 0.0:
            return 0.0 if diff == 0.0 else math.inf
        return diff / norm

    def _average_int_buffers(self, inv: float) -> None:
        # Integer buffers (BatchNorm's num_batches_tracked) are averaged exactly in float64
        # and rounded back; they are small and rare, so a second collective is cheap.
        ibuf = [b.detach().to("cpu", torch.float64).mul_(inv) for b in self.int_buffers]
        if self.backend is Backend.NCCL:
            ibuf = [t.to(self.int_buffers[0].device) for t in ibuf]
        all_reduce_buckets(ibuf, op=dist.ReduceOp.SUM)
        self.bytes_sent += sum(t.numel() * t.element_size() for t in ibuf)
        self._set_int_buffers(ibuf)

    def _set_int_buffers(self, averaged: Sequence[Tensor]) -> None:
        """The integer buffers := their float64 averages, rounded back (flat or shaped)."""
        for b, t in zip(self.int_buffers, averaged, strict=True):
            b.copy_(t.view_as(b).round().to(b.dtype))

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
