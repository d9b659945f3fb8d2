"""Parameter averaging for the cadence and async policies.

One averaging round on rank ``r`` with weight ``w_r = count_r / Σ count`` (its batches in the
window over everyone's):

1. ``θ_avg = Σ_r w_r θ_r`` for parameters, ``b_avg = (1/M) Σ_r b_r`` over the ``M`` member ranks
   for buffers (floating buffers and integer ones, the latter in float64 and rounded back),
   summed by the run's :class:`~flodl_ddp._reduce.Reducer` from flat buffers: one for the
   parameters and float buffers together, one for the integer buffers;
2. the outer optimizer turns the consensus into the new global weights (plain averaging keeps
   ``θ_avg``; SlowMo / DiLoCo step on ``Δ = θ_global − θ_avg``);
3. the rank writes the result back: ``θ_r := θ_global``, or with EASGD (cpu-async)
   ``θ_r := (1 − α) θ_r + α θ_global``;
4. the rank's divergence ``‖θ_pre − θ_post‖ / ‖θ_post‖`` is returned for the convergence guard.

The flat buffers live on the training device (``nccl`` backend: NCCL for CUDA tensors, gloo for
CPU ones) or in host memory (``cpu`` backend, and every shared-memory round).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ._outer import OuterAvg
from ._reduce import LocalReducer, Reducer, Segment


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
    return outer is None or type(outer) is OuterAvg


class Averager:
    """Averages ``model``'s parameters and buffers with the other ranks (see the module doc).

    Args:
        model: this rank's replica.
        on_host: keep the flat buffers in host memory (the ``cpu`` backend) rather than on the
            parameters' device.
        easgd_alpha: blend factor in (0, 1], ``None`` for a full overwrite.
        outer: an outer optimizer (``None`` or ``OuterAvg``: plain averaging).
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        on_host: bool = True,
        easgd_alpha: float | None = None,
        outer: Any = None,
    ) -> None:
        self.params: list[Tensor] = list(model.parameters())
        self.float_buffers = [b for b in model.buffers() if b.is_floating_point()]
        self.int_buffers = [b for b in model.buffers() if not b.is_floating_point()]
        self.alpha = easgd_alpha
        self.outer = None if _is_plain_average(outer) else outer
        self.reducer: Reducer = LocalReducer()
        self.rounds = 0
        self.bytes_sent = 0
        """Bytes this rank handed to all-reduce or wrote to its shared slot so far."""
        self._sizes = [p.numel() for p in self.params]
        self._n_params = sum(self._sizes)
        device = "cpu" if on_host or not self.params else self.params[0].device
        dtype = self.params[0].dtype if self.params else torch.float32
        for p in self.params[1:]:
            dtype = torch.promote_types(dtype, p.dtype)
        n = self._n_params + sum(b.numel() for b in self.float_buffers)
        self.flat = torch.empty(n, dtype=dtype, device=device)
        """``[θ (all parameters) | float buffers]``, in the parameters' promoted dtype."""
        self.ints = torch.empty(sum(b.numel() for b in self.int_buffers), dtype=torch.float64)
        # The global weights the outer optimizer steps on: identical on every rank, since every
        # rank receives the same consensus and runs the same deterministic step.
        self.global_params: list[Tensor] | None = None
        if self.outer is not None:
            self.global_params = [p.detach().to(device, copy=True) for p in self.params]
        # With EASGD the replicas differ after a round; the last consensus is the run's result.
        self.consensus: list[Tensor] | None = None

    def specs(self) -> list[tuple[int, torch.dtype]]:
        """``(numel, dtype)`` of each flat buffer (what a shared-memory slot must hold)."""
        return [(self.flat.numel(), self.flat.dtype), (self.ints.numel(), torch.float64)]

    @property
    def shared(self) -> bool:
        """Whether each rank stages its values before the arrival exchange (shared memory)."""
        return not self.reducer.filled_scaled

    # ---- one round ---------------------------------------------------------------------------

    def _fill(self, scale: float, buffer_scale: float) -> None:
        """This rank's values, scaled, into the reducer's targets."""
        flat = self.reducer.target(0, self.flat)
        views = flat[: self._n_params].split(self._sizes)
        for p, v in zip(self.params, views, strict=True):
            _scaled_into(v.view_as(p), p.detach(), scale)
        sizes = [b.numel() for b in self.float_buffers]
        for b, v in zip(self.float_buffers, flat[self._n_params :].split(sizes), strict=True):
            _scaled_into(v.view_as(b), b, buffer_scale)
        if self.int_buffers:
            ints = self.reducer.target(1, self.ints)
            torch.cat(
                [b.detach().reshape(-1).to("cpu", torch.float64) for b in self.int_buffers],
                out=ints,
            ).mul_(buffer_scale)

    @torch.no_grad()
    def stage(self) -> None:
        """Shared memory: copy this rank's raw values into its slot. Call it before the round's
        arrival exchange: that exchange is what tells the other ranks the slot is written."""
        if self.shared:
            self._fill(1.0, 1.0)

    @torch.no_grad()
    def average(self, weights: Sequence[float], members: Sequence[int], rank: int) -> float:
        """One round: ``weights[r]`` is rank ``r``'s share of the window's batches (0 for a rank
        that is not a member), ``members`` the ranks taking part; returns the divergence.

        Every member calls it in the same round (a collective)."""
        self.rounds += 1
        if len(members) <= 1 and isinstance(self.reducer, LocalReducer):
            return 0.0
        inv = 1.0 / len(members)
        even = tuple(inv if r in members else 0.0 for r in range(len(weights)))
        if not self.shared:
            self._fill(float(weights[rank]), inv)
        n = self.flat.numel()
        segs = [Segment(0, self._n_params, tuple(weights)), Segment(self._n_params, n, even, False)]
        self.bytes_sent += self.reducer.reduce(0, self.flat, segs, rank)
        if self.int_buffers:
            int_seg = [Segment(0, self.ints.numel(), even, False)]
            self.bytes_sent += self.reducer.reduce(1, self.ints, int_seg, rank)
            for b, t in zip(
                self.int_buffers,
                self.ints.split([b.numel() for b in self.int_buffers]),
                strict=True,
            ):
                b.copy_(t.view_as(b).round().to(b.dtype))
        sizes = [b.numel() for b in self.float_buffers]
        for b, v in zip(self.float_buffers, self.flat[self._n_params :].split(sizes), strict=True):
            b.copy_(v.view_as(b))
        views = self.flat[: self._n_params].split(self._sizes)
        return self._write_back([v.view_as(p) for v, p in zip(views, self.params, strict=True)])

    def _write_back(self, avg: list[Tensor]) -> float:
        """The consensus ``avg`` through the outer optimizer and EASGD into the replica;
        returns the divergence."""
        new = avg
        if self.outer is not None:
            assert self.global_params is not None
            self.outer.step(self.global_params, avg)
            new = self.global_params
        local = [p.detach() for p in self.params]
        if new and new[0].device != local[0].device:
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
        self.consensus = [s.clone() for s in state["consensus"]] if "consensus" in state else None
