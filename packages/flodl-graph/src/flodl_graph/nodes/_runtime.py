"""Small run-time functions shared by the composite nodes and the generated forward.

They hold the checks that need the data (halting decisions, switch indices, map shapes), so the
generated code stays straight-line.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

from flodl_core import ConfigError, ShapeError


def supports_refs(module: nn.Module) -> bool:
    """Whether ``module`` takes named refs (implements ``forward_named(x, refs)``)."""
    return callable(getattr(type(module), "forward_named", None))


def has_reset(module: nn.Module) -> bool:
    """Whether ``module`` defines ``reset()`` (looked up on the class: a submodule called
    ``reset`` must not count)."""
    return callable(getattr(type(module), "reset", None))


def halt(signal: Tensor | float | int | bool, node: str = "loop") -> bool:
    """The halting rule of conditional loops: halt iff the first element is > 0.

    An empty tensor never halts. The value is read to the host (no gradient through it).
    ``node`` names the loop when the condition returned neither a tensor nor a number.
    """
    if isinstance(signal, Tensor):
        if signal.numel() == 0:
            return False
        return bool(signal.detach().reshape(-1)[0] > 0)
    if not isinstance(signal, (str, bytes)):  # float("1") would pass a string as a number
        with contextlib.suppress(TypeError, ValueError):  # bool, int, float, numpy scalars
            return float(signal) > 0  # type: ignore[arg-type]
    raise ConfigError(
        f"{node}: the halting condition returned {type(signal).__name__}; expected a "
        "tensor or a number (the loop halts when its first element is > 0)"
    )


def gate_weights(weights: object, n: int, node: str) -> Tensor:
    """A gate router's output, checked to hold one weight per expert: (..., n).

    Another last dim would broadcast against the stacked experts (..., D, n): silently for a
    last dim of 1 (every expert weighted alike), else as a torch error about that stack.
    """
    if not isinstance(weights, Tensor):
        raise ConfigError(
            f"{node}: the router returned {type(weights).__name__}; expected a tensor of "
            f"weights (..., {n}), one per expert"
        )
    if weights.dim() == 0 or weights.shape[-1] != n:
        raise ShapeError(
            f"{node}: the router returned shape {tuple(weights.shape)}; expected weights "
            f"(..., {n}), one per expert (e.g. SoftmaxRouter(in_features, {n}))"
        )
    return weights


def switch_index(selected: Tensor | int, n: int, node: str) -> int:
    """The branch index chosen by a switch selector, checked against the ``n`` branches.

    ``selected``: a Python int or a single-element tensor (the whole batch takes one branch).
    """
    if isinstance(selected, Tensor):
        if selected.numel() != 1:
            raise ShapeError(
                f"{node}: the selector returned a tensor of shape {tuple(selected.shape)}; "
                "expected a single element (one branch index for the whole batch)"
            )
        if selected.is_floating_point() or selected.is_complex():
            value = float(selected.detach().reshape(()))
            if value != int(value):
                raise ConfigError(f"{node}: the selector returned {value}; expected an integer")
            index = int(value)
        else:
            index = int(selected.detach().reshape(()))
    elif isinstance(selected, int) and not isinstance(selected, bool):
        index = selected
    else:
        raise ConfigError(
            f"{node}: the selector returned {type(selected).__name__}; "
            "expected an int or a single-element tensor"
        )
    if not 0 <= index < n:
        raise ConfigError(
            f"{node}: the selector chose branch {index} but only {n} branches exist "
            f"(expected 0..{n - 1})"
        )
    return index


def map_each(body: nn.Module, x: Tensor, node: str = "map") -> Tensor:
    """Run ``body`` on every 1-row slice of ``x`` along dim 0 and concatenate the results.

    x: (N, ...) -> (N, ...out). An empty ``x`` (N == 0) passes through unchanged.
    """
    if x.dim() == 0:  # a 0-d tensor has no rows to map over
        raise ShapeError(f"{node}: map needs an input with a row dim (N, ...); got a 0-d tensor")
    if x.shape[0] == 0:
        return x
    return torch.cat([body(row) for row in x.split(1)], 0)


def map_slices(body: nn.Module, x: Tensor, n: int, batched: bool, node: str) -> Tensor:
    """Split the last dim of ``x`` into ``n`` slices, run ``body`` on each, join them back.

    x: (B, ..., D) -> rows (B·…·n, D/n) -> body -> (B, ..., out·n).
    """
    if x.dim() < 2:
        raise ShapeError(
            f"{node}: map(...).slices({n}) needs an input of rank >= 2 (B, D); "
            f"got shape {tuple(x.shape)}"
        )
    d = x.shape[-1]
    if d % n != 0:
        raise ShapeError(
            f"{node}: map(...).slices({n}) needs the last dim divisible by {n}; "
            f"got shape {tuple(x.shape)}"
        )
    rows = x.reshape(-1, d // n)
    out = body(rows) if batched else map_each(body, rows)
    return out.reshape(*x.shape[:-1], -1)
