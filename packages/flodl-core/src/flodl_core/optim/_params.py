"""Turning "some parameters" (a module, an iterable, named pairs) into a checked list."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import nn

from .._errors import ConfigError

#: What flodl accepts wherever parameters are expected.
ParamsLike = (
    nn.Module
    | torch.Tensor
    | Mapping[str, torch.Tensor]
    | Iterable[torch.Tensor]
    | Iterable[tuple[str, torch.Tensor]]
)


def named_params(params: ParamsLike, where: str) -> list[tuple[str | None, torch.Tensor]]:
    """``[(name or None, tensor), ...]`` from a module, a tensor, a name->tensor mapping, or an
    iterable of tensors / ``(name, tensor)`` pairs.

    A module is read with ``named_parameters()``: iterating an ``nn.Sequential`` directly would
    yield its sub-modules, a classic mistake this turns into the intended meaning.
    """
    if isinstance(params, nn.Module):
        return list(params.named_parameters())
    if isinstance(params, torch.Tensor):
        return [(None, params)]
    if isinstance(params, Mapping):
        items: Iterable[object] = params.items()
    elif isinstance(params, (str, bytes)) or not isinstance(params, Iterable):
        raise ConfigError(
            f"{where}: expected parameters (a module, Parameters, or (name, Parameter) pairs), "
            f"got {type(params).__name__}"
        )
    else:
        items = params
    out: list[tuple[str | None, torch.Tensor]] = []
    for i, item in enumerate(items):
        if isinstance(item, torch.Tensor):
            out.append((None, item))
        elif (
            isinstance(item, tuple)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], torch.Tensor)
        ):
            out.append((item[0], item[1]))
        else:
            raise ConfigError(
                f"{where}: item {i} is a {type(item).__name__}; expected a Parameter or a "
                "(name, Parameter) pair"
            )
    return out


def tensors(params: ParamsLike, where: str) -> list[torch.Tensor]:
    """The tensors of :func:`named_params`, names dropped."""
    return [t for _, t in named_params(params, where)]


def describe(name: str | None, t: torch.Tensor) -> str:
    """How an error message names a parameter."""
    return f"'{name}'" if name else f"a parameter of shape {tuple(t.shape)}"
