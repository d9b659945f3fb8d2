"""The seven optimizers: torch's own classes, with groups, lr control and fast kernels by default.

Each is a subclass of its ``torch.optim`` namesake, so it *is* a torch optimizer: ``state_dict``,
``torch.optim.lr_scheduler``, ``GradScaler`` and checkpoint code work unchanged, and the update
rule is torch's (see the docs of each for the formula). Differences from constructing the torch
class directly:

- ``fused`` / ``foreach`` default to the fastest kernel the parameters' device supports
  (fused on CPU and CUDA for SGD, Adam, AdamW, Adagrad). Pass ``fused=False`` for sparse
  gradients (``Embedding(sparse=True)``), which fused kernels reject.
- ``params`` may also be an ``nn.Module`` (its named parameters).
- ``Cls.with_groups(**defaults).group(params, lr=..., **overrides).build()`` builds groups.
- ``set_lr``, ``set_group_lr``, ``scale_lr``, ``lr``, ``group_lr``, ``group_lrs``.

Where floDl (Rust) differs: its SGD had no nesterov/dampening, and its NAdam was a simplified
variant without ``momentum_decay``; these classes use torch's full update rules.
"""

from __future__ import annotations

from typing import Any, TypeVar

import torch

from ._groups import GroupBuilder
from ._impl import materialize, pick_kernels
from ._lr_control import LrControl, check_lr

OptT = TypeVar("OptT", bound=torch.optim.Optimizer)
Betas = tuple[float, float]


class FlodlOptimizer(LrControl):
    """Mixin adding the group builder and lr control to a ``torch.optim`` optimizer subclass."""

    @classmethod
    def with_groups(cls: type[OptT], **defaults: Any) -> GroupBuilder[OptT]:
        """Start a group builder; ``defaults`` apply to every group unless overridden."""
        return GroupBuilder(cls, defaults)


def _prepare(
    torch_cls: type[torch.optim.Optimizer], params: Any, lr: Any, options: dict[str, Any]
) -> list[Any]:
    # torch's SGD takes a NaN lr, every class takes an infinite one, and a string fails in a
    # comparison: all would only show up later as NaN weights or an unrelated TypeError.
    check_lr(lr, torch_cls.__name__)
    items = materialize(params, torch_cls.__name__)
    options["fused"], options["foreach"] = pick_kernels(
        torch_cls,
        items,
        options.get("fused"),
        options.get("foreach"),
        bool(options.get("differentiable", False)),
    )
    if options["fused"] is None:
        del options["fused"]  # RMSprop, RAdam, NAdam have no such argument
    return items


class SGD(FlodlOptimizer, torch.optim.SGD):
    """Stochastic gradient descent, optionally with (Nesterov) momentum and L2 weight decay."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        **options: Any,
    ) -> None:
        items = _prepare(torch.optim.SGD, params, lr, options)
        super().__init__(items, lr, momentum, dampening, weight_decay, nesterov, **options)


class Adam(FlodlOptimizer, torch.optim.Adam):
    """Adam (Kingma & Ba, 2015) with coupled L2 ``weight_decay``; see :class:`AdamW`."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: Betas = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        **options: Any,
    ) -> None:
        items = _prepare(torch.optim.Adam, params, lr, options)
        super().__init__(items, lr, betas, eps, weight_decay, amsgrad, **options)


class AdamW(FlodlOptimizer, torch.optim.AdamW):
    """Adam with decoupled weight decay (Loshchilov & Hutter, 2019); torch default wd 0.01."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: Betas = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        **options: Any,
    ) -> None:
        items = _prepare(torch.optim.AdamW, params, lr, options)
        super().__init__(items, lr, betas, eps, weight_decay, amsgrad, **options)


class RMSprop(FlodlOptimizer, torch.optim.RMSprop):
    """RMSprop (Hinton, 2012): divide by a running RMS of gradients."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        **options: Any,
    ) -> None:
        items = _prepare(torch.optim.RMSprop, params, lr, options)
        super().__init__(
            items,
            lr=lr,
            alpha=alpha,
            eps=eps,
            weight_decay=weight_decay,
            momentum=momentum,
            centered=centered,
            **options,
        )


class Adagrad(FlodlOptimizer, torch.optim.Adagrad):
    """Adagrad (Duchi et al., 2011); ``clr = lr / (1 + (step − 1)·lr_decay)``."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        **options: Any,
    ) -> None:
        items = _prepare(torch.optim.Adagrad, params, lr, options)
        super().__init__(
            items, lr, lr_decay, weight_decay, initial_accumulator_value, eps, **options
        )


class RAdam(FlodlOptimizer, torch.optim.RAdam):
    """Rectified Adam (Liu et al., 2020): variance-rectified adaptive lr, no warmup needed."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: Betas = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        **options: Any,
    ) -> None:
        items = _prepare(torch.optim.RAdam, params, lr, options)
        super().__init__(items, lr, betas, eps, weight_decay, **options)


class NAdam(FlodlOptimizer, torch.optim.NAdam):
    """Adam with Nesterov momentum (Dozat, 2016), torch's rule with ``momentum_decay``."""

    def __init__(
        self,
        params: Any,
        lr: float = 2e-3,
        betas: Betas = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum_decay: float = 4e-3,
        **options: Any,
    ) -> None:
        items = _prepare(torch.optim.NAdam, params, lr, options)
        super().__init__(items, lr, betas, eps, weight_decay, momentum_decay, **options)
