"""Which entries of an optimizer's per-parameter state must have their parameter's shape.

``Optimizer.load_state_dict`` pairs saved state with parameters by position and never compares
shapes, so state saved for another model loads and fails at the next ``step()`` deep in a
kernel (a fused CPU kernel crashes the process). The state entries below hold one value per
element of their parameter in every ``torch.optim`` optimizer that keeps them (Adam's moments,
SGD's momentum, RMSprop's averages, Adagrad's sum ...), so a tensor of another shape there was
saved for another parameter. Other entries are not judged: factored state (Adafactor's
``row_var`` of shape ``(m, 1)`` for an ``(m, n)`` weight) and the state of optimizers from other
libraries may legitimately have other shapes.
"""

from __future__ import annotations

from typing import Any

import torch

ELEMENTWISE = frozenset(
    {
        "exp_avg",  # Adam, AdamW, Adamax, NAdam, RAdam
        "exp_avg_sq",
        "max_exp_avg_sq",
        "exp_inf",  # Adamax
        "momentum_buffer",  # SGD, RMSprop
        "square_avg",  # RMSprop, Adadelta
        "grad_avg",  # RMSprop(centered=True)
        "acc_delta",  # Adadelta
        "sum",  # Adagrad
        "ax",  # ASGD
        "prev",  # Rprop
        "step_size",
    }
)


def misfit(entry: Any, param: torch.Tensor) -> tuple[str, tuple[int, ...]] | None:
    """``(key, saved shape)`` of the first element-wise state tensor in ``entry`` whose shape is
    not ``param``'s; ``None`` when all fit (or ``entry`` is not a state dict)."""
    if not isinstance(entry, dict):
        return None
    for key, v in entry.items():
        if key in ELEMENTWISE and isinstance(v, torch.Tensor) and v.shape != param.shape:
            return key, tuple(v.shape)
    return None
