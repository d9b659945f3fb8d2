"""Which tensors of a module a checkpoint holds, and in what order."""

from __future__ import annotations

import os

import torch
from torch import nn

from .._checks import check_path
from .._errors import CheckpointError, ConfigError
from ._meta import META_NAME


def check_module_and_path(fn: str, module: object, path: object) -> None:
    """Refuse ``fn(module, path)`` called with something else, naming the mistake: arguments
    swapped (``fn(path, model)``), a non-module model, a path that is not a path."""
    if not isinstance(module, nn.Module):
        if isinstance(path, nn.Module) and isinstance(module, (str, os.PathLike)):
            raise ConfigError(
                f"{fn}(module, path): the arguments are swapped (got a path {os.fspath(module)!r} "
                f"first and a {type(path).__name__} second); call {fn}(model, path)"
            )
        raise ConfigError(
            f"{fn}: module must be a torch.nn.Module, got {type(module).__name__}; "
            f"call {fn}(model, path)"
        )
    check_path(path, "path", where=fn)


COMPILED = "_orig_mod."
"""What ``torch.compile``'s wrapper puts before every ``state_dict`` key under it."""


def plain_name(name: str) -> str:
    """A ``state_dict`` key without :data:`COMPILED`: a checkpoint names its tensors so, and
    moves between a compiled model and the plain one (``encoder._orig_mod.w`` -> ``encoder.w``)."""
    return name.replace(COMPILED, "")


def module_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """``(state_dict key, tensor)`` for every tensor in ``module.state_dict()``.

    Parameters come first, then buffers (the file order of floDl (Rust)), each group in
    module order. The names are the ``state_dict()`` keys, so tied weights appear under every
    name they have and non-persistent buffers are left out, exactly as ``state_dict()`` does;
    a ``torch.compile`` wrapper's ``_orig_mod.`` is left out of them (:func:`plain_name`).
    """
    if not isinstance(module, nn.Module):
        raise CheckpointError(f"expected a torch.nn.Module, got {type(module).__name__}")
    state = module.state_dict(keep_vars=True)
    param_names = {name for name, _ in module.named_parameters(remove_duplicate=False)}
    params: list[tuple[str, torch.Tensor]] = []
    others: list[tuple[str, torch.Tensor]] = []
    for name, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"state_dict entry {name!r} is a {type(value).__name__}, not a tensor; "
                ".fdl files hold tensors only"
            )
        if name == META_NAME:
            raise CheckpointError(f"state_dict key {META_NAME!r} is reserved for file metadata")
        (params if name in param_names else others).append((plain_name(name), value))
    return params + others
