"""Parameter averaging for the cadence and async policies; one round on rank ``r``, with
``w_r = count_r / Σ count`` (its share of the window's batches):

1. ``θ_avg = Σ_r w_r θ_r``, buffers ``b_avg = (1/M) Σ_r b_r`` over the ``M`` members (integer
   ones in float64, rounded back), by the run's :class:`~flodl_ddp._reduce.Reducer`;
2. the outer optimizer turns the consensus into the global weights (plain averaging keeps
   ``θ_avg``; SlowMo / DiLoCo step on ``Δ = θ_global − θ_avg``);
3. write-back: ``θ_r := θ_global``, or with EASGD ``θ_r := (1 − α) θ_r + α θ_global``;
4. the divergence ``‖θ_pre − θ_post‖ / ‖θ_post‖`` is returned for the convergence guard.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ._outer import OuterAvg, cpu_copy
from ._reduce import LocalReducer, Reducer, Segment


def _scaled_into(out: Tensor, src: Tensor, factor: float) -> None:
    """``out := factor · src``, in one pass when ``src`` is on ``out``'s device and dtype."""
    if src.device == out.device and src.dtype == out.dtype:
        torch.mul(src, factor, out=out)
    else:
        out.copy_(src).mul_(factor)


def _norm(tensors: list[Tensor]) -> float:
    """The 2-norm of all ``tensors`` together, accumulated in float64."""
    return math.sqrt(sum(float(x) ** 2 for x in torch._foreach_norm(tensors))) if tensors else 0.0


class Averager:
    """Averages ``model``'s parameters and buffers with the other ranks (module doc). ``on_host``:
    keep the flat buffers in host memory (the ``cpu`` backend), not on the parameters' device;
    ``easgd_alpha``: blend factor in (0, 1], ``None`` for a full overwrite; ``outer``: an outer
    optimizer (``None`` or ``OuterAvg``: plain averaging)."""

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
        self.outer = None if outer is None or type(outer) is OuterAvg else outer
        self.reducer: Reducer = LocalReducer()
        self.rounds = self.bytes_sent = 0  # bytes: to all-reduce or this rank's shared slot
        self._n_params = sum(p.numel() for p in self.params)
        device = "cpu" if on_host or not self.params else self.params[0].device
        dtypes = [p.dtype for p in self.params] or [torch.float32]
        dtype = functools.reduce(torch.promote_types, dtypes)
        # [θ (all parameters) | float buffers], in the parameters' promoted dtype
        n = self._n_params + sum(b.numel() for b in self.float_buffers)
        self.flat = torch.empty(n, dtype=dtype, device=device)
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

    def _views(self, flat: Tensor) -> list[Tensor]:
        tensors = self.params + self.float_buffers
        parts = flat.split([t.numel() for t in tensors])
        return [v.view_as(t) for v, t in zip(parts, tensors, strict=True)]

    def _fill(self, scale: float, buffer_scale: float) -> None:
        n = len(self.params)
        views = self._views(self.reducer.target(0, self.flat))
        for i, (t, v) in enumerate(zip(self.params + self.float_buffers, views, strict=True)):
            _scaled_into(v, t.detach(), scale if i < n else buffer_scale)
        if self.int_buffers:
            ints = [b.detach().reshape(-1).to("cpu", torch.float64) for b in self.int_buffers]
            torch.cat(ints, out=self.reducer.target(1, self.ints)).mul_(buffer_scale)

    @torch.no_grad()
    def stage(self) -> None:
        """Shared memory: copy this rank's raw values into its slot. Call it before the round's
        arrival exchange: that exchange is what tells the other ranks the slot is written."""
        if self.shared:
            self._fill(1.0, 1.0)

    @torch.no_grad()
    def average(self, weights: Sequence[float], members: Sequence[int], rank: int) -> float:
        """One round (a collective of every member): ``weights[r]`` is rank ``r``'s share of the
        window's batches (0 for a non-member); returns the divergence."""
        self.rounds += 1
        if len(members) <= 1 and isinstance(self.reducer, LocalReducer):
            return 0.0
        even = tuple(1.0 / len(members) if r in members else 0.0 for r in range(len(weights)))
        if not self.shared:
            self._fill(float(weights[rank]), 1.0 / len(members))
        segs = [
            Segment(0, self._n_params, tuple(weights)),
            Segment(self._n_params, self.flat.numel(), even, False),
        ]
        self.bytes_sent += self.reducer.reduce(0, self.flat, segs, rank)
        if self.int_buffers:
            seg = [Segment(0, self.ints.numel(), even, False)]
            self.bytes_sent += self.reducer.reduce(1, self.ints, seg, rank)
            parts = self.ints.split([b.numel() for b in self.int_buffers])
            for b, t in zip(self.int_buffers, parts, strict=True):
                b.copy_(t.view_as(b).round().to(b.dtype))
        views = self._views(self.flat)
        for b, v in zip(self.float_buffers, views[len(self.params) :], strict=True):
            b.copy_(v)
        return self._write_back(views[: len(self.params)])

    def _write_back(self, avg: list[Tensor]) -> float:
        """Consensus → outer optimizer → EASGD → replica; returns the divergence."""
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
        diff, norm = _norm(local), _norm(new)
        torch._foreach_copy_(local, new)
        if norm <= 0.0:
            return 0.0 if diff == 0.0 else math.inf
        return diff / norm

    def final_params(self) -> list[Tensor] | None:
        """The consensus to report as the run's result when the replicas differ (EASGD)."""
        return self.consensus

    def state_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rounds": self.rounds}
        if self.global_params is not None:
            out["global"] = [cpu_copy(t) for t in self.global_params]
        if self.outer is not None:
            out["outer"] = self.outer.state_dict()
        if self.consensus is not None:
            out["consensus"] = [cpu_copy(t) for t in self.consensus]
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rounds = int(state.get("rounds", 0))
        if self.global_params is not None and "global" in state:
            for t, s in zip(self.global_params, state["global"], strict=True):
                t.copy_(s)
        if self.outer is not None and "outer" in state:
            self.outer.load_state_dict(state["outer"])
        self.consensus = [s.clone() for s in state["consensus"]] if "consensus" in state else None
