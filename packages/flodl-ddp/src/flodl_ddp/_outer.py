"""Outer optimizers: turn each averaging into a step on the global weights.

An outer optimizer treats the *pseudo-gradient* ``Δ = θ_global − θ_avg`` (how far the weighted
average of the replicas moved from the window's starting weights) as a gradient and steps the
global weights with it: :class:`OuterAvg` is plain averaging, :class:`SlowMo` and
:class:`DiLoCo` add momentum across windows (long windows keep the accuracy of frequent
averaging). They work in place on lists of tensors of equal shapes and save their state with
``state_dict()`` (tensors as CPU copies, everything else plain JSON types).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from flodl_core import CheckpointError, ConfigError, check_finite

from ._errors import check_state_keys


def cpu_copy(v: Any) -> Any:
    """What a state dict keeps of ``v``: a CPU copy of a tensor, anything else as it is."""
    return v.detach().to("cpu", copy=True) if isinstance(v, Tensor) else v


class OuterOptimizer:
    """Base class: ``step(global_params, averaged)`` updates ``global_params`` in place;
    subclasses implement :meth:`_step` with the pseudo-gradients ``Δ_i = global_i − averaged_i``
    (shapes of the parameters) and keep their state in tensors of the same shapes."""

    def step(self, global_params: Sequence[Tensor], averaged: Sequence[Tensor]) -> None:
        """One outer step. ``global_params``: the weights every replica started the window
        from; ``averaged``: the replicas' (count-weighted) average at its end."""
        if len(global_params) != len(averaged):
            raise ConfigError(
                f"outer step got {len(global_params)} global tensors and {len(averaged)} averaged "
                "ones; pass the same parameters in the same order"
            )
        for i, (g, a) in enumerate(zip(global_params, averaged, strict=True)):
            if g.shape != a.shape:
                raise ConfigError(
                    f"outer step: tensor {i} has shape {tuple(g.shape)} globally but "
                    f"{tuple(a.shape)} averaged"
                )
        with torch.no_grad():
            deltas = [g - a for g, a in zip(global_params, averaged, strict=True)]
            self._step(list(global_params), deltas)

    def _step(self, params: list[Tensor], deltas: list[Tensor]) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class OuterAvg(OuterOptimizer):
    """Plain averaging, the default: ``θ_global ← θ_avg`` (SGD with lr 1 on Δ, no momentum)."""

    def _step(self, params: list[Tensor], deltas: list[Tensor]) -> None:
        for p, d in zip(params, deltas, strict=True):
            p.sub_(d)

    def __repr__(self) -> str:
        return "OuterAvg()"


class _MomentumOuter(OuterOptimizer):
    """An outer step with a learning rate, a momentum and one momentum buffer per tensor,
    saved as ``{"momentum_buffer": [CPU tensors] or None}`` (``None`` before the first step)."""

    def __init__(self, lr: float, momentum: float) -> None:
        self.lr = check_finite(lr, "lr", ge=0)
        self.momentum = check_finite(momentum, "momentum", ge=0, le=1)
        self._buf: list[Tensor] | None = None

    def _placed(self, like: Sequence[Tensor]) -> list[Tensor] | None:
        """The buffers next to the weights (loaded from a checkpoint, they live on the CPU)."""
        bufs = self._buf
        if bufs is None:
            return None
        if [b.shape for b in bufs] != [t.shape for t in like]:
            raise CheckpointError(
                "outer optimizer state does not match the model: "
                f"{[tuple(b.shape) for b in bufs]} vs {[tuple(t.shape) for t in like]}"
            )
        return [b.to(device=t.device, dtype=t.dtype) for b, t in zip(bufs, like, strict=True)]

    def state_dict(self) -> dict[str, Any]:
        return {"momentum_buffer": None if self._buf is None else [cpu_copy(b) for b in self._buf]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_state_keys(type(self).__name__, state, ["momentum_buffer"])
        bufs = state["momentum_buffer"]
        self._buf = None if bufs is None else [torch.as_tensor(b).clone() for b in bufs]


class SlowMo(_MomentumOuter):
    """Slow momentum (Wang, Tantia, Ballas, Rabbat, "SlowMo: Improving Communication-Efficient
    Distributed SGD with Slow Momentum", ICLR 2020, arXiv:1910.00643), Algorithm 1:

        u ← β·u + Δ / γ
        θ_global ← θ_global − α·γ·u

    with ``α = lr`` (slow learning rate, ≈ 1), ``β = momentum`` (0.5-0.8 in the paper) and
    ``γ = inner_lr`` (the base optimizer's learning rate; ``u`` starts at 0). With a constant
    ``γ`` it cancels out (``v = γ·u`` follows ``v ← β·v + Δ``), so the default 1.0 is right for
    any constant inner rate; under an inner LR schedule set ``inner_lr`` to the current rate
    before each step. ``momentum=0, lr=1`` is :class:`OuterAvg`.
    """

    def __init__(self, lr: float = 1.0, momentum: float = 0.5, *, inner_lr: float = 1.0) -> None:
        super().__init__(lr, momentum)
        why = "it divides the pseudo-gradient"
        self.inner_lr = check_finite(inner_lr, "inner_lr", gt=0, expected="> 0", note=why)

    def _step(self, params: list[Tensor], deltas: list[Tensor]) -> None:
        self._buf = self._placed(params) or [torch.zeros_like(p) for p in params]
        for p, d, u in zip(params, deltas, self._buf, strict=True):
            u.mul_(self.momentum).add_(d, alpha=1.0 / self.inner_lr)
            p.add_(u, alpha=-self.lr * self.inner_lr)

    def __repr__(self) -> str:
        return f"SlowMo(lr={self.lr:g}, momentum={self.momentum:g}, inner_lr={self.inner_lr:g})"


class DiLoCo(_MomentumOuter):
    """DiLoCo's outer step (Douillard et al., "DiLoCo: Distributed Low-Communication Training of
    Language Models", 2023, arXiv:2311.08105): Nesterov SGD on the pseudo-gradient, lr 0.7,
    momentum 0.9, exactly as ``torch.optim.SGD(lr, momentum, nesterov=True)`` with ``.grad = Δ``:

        b ← Δ                      (first step)
        b ← μ·b + Δ                (later steps)
        θ_global ← θ_global − lr·(Δ + μ·b)
    """

    def __init__(self, lr: float = 0.7, momentum: float = 0.9) -> None:
        super().__init__(lr, momentum)

    def _step(self, params: list[Tensor], deltas: list[Tensor]) -> None:
        self._buf = self._placed(params) or [torch.zeros_like(d) for d in deltas]  # first: b = Δ
        for p, d, b in zip(params, deltas, self._buf, strict=True):
            b.mul_(self.momentum).add_(d)
            p.add_(d.add(b, alpha=self.momentum), alpha=-self.lr)

    def __repr__(self) -> str:
        return f"DiLoCo(lr={self.lr:g}, momentum={self.momentum:g})"


class TorchOuter(OuterOptimizer):
    """Any ``torch.optim`` optimizer as the outer step: ``factory(params) -> Optimizer`` is
    called once, at the first step, with ``nn.Parameter`` copies of the global weights; each step
    sets their ``.grad`` to Δ, calls ``optimizer.step()`` and copies the result back into the
    global tensors. E.g. ``TorchOuter(lambda ps: torch.optim.Adam(ps, lr=1e-3))`` (a top-level
    function when the optimizer must be pickled to other processes)."""

    def __init__(self, factory: Callable[[list[nn.Parameter]], torch.optim.Optimizer]) -> None:
        if not callable(factory):
            raise ConfigError(f"factory must be callable(params) -> Optimizer, got {factory!r}")
        self.factory = factory
        self._params: list[nn.Parameter] | None = None
        self._optimizer: torch.optim.Optimizer | None = None
        self._pending: dict[str, Any] | None = None

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The wrapped optimizer (``None`` before the first step)."""
        return self._optimizer

    def _step(self, params: list[Tensor], deltas: list[Tensor]) -> None:
        if self._params is None:
            self._params = [nn.Parameter(p.detach().clone()) for p in params]
            opt = self.factory(self._params)
            if not isinstance(opt, torch.optim.Optimizer):
                raise ConfigError(
                    f"TorchOuter: factory made a {type(opt).__name__}, not an Optimizer"
                )
            if self._pending:
                opt.load_state_dict(self._pending)
            self._optimizer, self._pending = opt, None
        assert self._optimizer is not None
        if len(self._params) != len(params):
            raise ConfigError(
                f"outer step got {len(params)} tensors, the optimizer was built for "
                f"{len(self._params)}"
            )
        for q, p, d in zip(self._params, params, deltas, strict=True):
            q.copy_(p)
            q.grad = d.clone()
        self._optimizer.step()
        for q, p in zip(self._params, params, strict=True):
            p.copy_(q)
            q.grad = None

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's ``state_dict()`` (momentum tensors moved to the CPU)."""
        if self._optimizer is None:
            return dict(self._pending or {})
        state = self._optimizer.state_dict()
        moments = {k: {n: cpu_copy(v) for n, v in s.items()} for k, s in state["state"].items()}
        return {"state": moments, "param_groups": state["param_groups"]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state:
            return
        if self._optimizer is None:
            self._pending = state  # applied when the first step builds the optimizer
        else:
            self._optimizer.load_state_dict(state)

    def __repr__(self) -> str:
        return f"TorchOuter({getattr(self.factory, '__name__', repr(self.factory))})"
