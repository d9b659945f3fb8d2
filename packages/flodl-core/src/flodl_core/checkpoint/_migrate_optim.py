"""Carrying an optimizer's state file across a change of the model's parameters.

A ``torch.optim`` state dict keys each parameter's state (Adam's moments, SGD's momentum) by its
position in the optimizer's parameter list, not by name. After a parameter is renamed, added,
removed or moved, the old file would load the wrong moments into the wrong parameters (or be
refused for a size mismatch). Migration names both sides, matches the names, and rewrites the
file in the new optimizer's order.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .._errors import CheckpointError, ConfigError, format_choices
from ._io import PathLike
from ._migrate import MigrateReport, _same_file
from ._moments import misfit
from ._state import read_state_file, state_kind, write_state

_WHERE = "migrate_optim_state_file"
Renames = Mapping[str, str | None] | MigrateReport


def _duplicates(names: Sequence[str]) -> list[str]:
    return sorted(n for n, c in Counter(names).items() if c > 1)


def _old_layout(state: Any, src: str) -> tuple[dict[Any, Any], list[dict[str, Any]], list[int]]:
    """``(per-parameter state, groups, flat old indices)``, checked to be an optimizer's."""
    if not (
        isinstance(state, dict)
        and isinstance(state.get("state"), dict)
        and isinstance(state.get("param_groups"), list)
        and all(
            isinstance(g, dict) and isinstance(g.get("params"), list) for g in state["param_groups"]
        )
    ):
        raise CheckpointError(
            f"{_WHERE}: {src} does not hold an optimizer state "
            "(expected 'state' and 'param_groups' with 'params' lists)"
        )
    groups: list[dict[str, Any]] = state["param_groups"]
    return state["state"], groups, [i for g in groups for i in g["params"]]


def _old_names(
    groups: list[dict[str, Any]], count: int, old_names: Sequence[str] | None, src: str
) -> list[str]:
    if old_names is not None:
        names = [str(n) for n in old_names]
        if len(names) != count:
            raise ConfigError(
                f"{_WHERE}: old_names has {len(names)} names but {src} holds state for {count} "
                "parameters; list every parameter the old optimizer had, in its order"
            )
    elif all(isinstance(g.get("param_names"), list) for g in groups):
        names = [str(n) for g in groups for n in g["param_names"]]
    else:
        raise CheckpointError(
            f"{_WHERE}: {src} does not name its parameters (the old optimizer was built from "
            "model.parameters(), not model.named_parameters()); pass old_names=[...] in the "
            "old optimizer's parameter order"
        )
    dup = _duplicates(names)
    if dup:
        raise ConfigError(f"{_WHERE}: old parameter names repeat: {', '.join(dup)}")
    return names


def _new_names(optimizer: torch.optim.Optimizer, model: nn.Module | None) -> list[str]:
    groups = optimizer.param_groups
    if all("param_names" in g for g in groups):
        return [str(n) for g in groups for n in g["param_names"]]
    if model is None:
        raise ConfigError(
            f"{_WHERE}: the optimizer does not name its parameters; build it from "
            "model.named_parameters() or pass model= so its parameters can be named"
        )
    by_id = {id(p): name for name, p in model.named_parameters(remove_duplicate=False)}
    names: list[str] = []
    for g, group in enumerate(groups):
        for i, p in enumerate(group["params"]):
            if id(p) not in by_id:
                raise ConfigError(
                    f"{_WHERE}: parameter {i} of optimizer group {g} (shape {tuple(p.shape)}) "
                    "is not a parameter of model"
                )
            names.append(by_id[id(p)])
    return names


def _sources(old: list[str], new: list[str], renames: Renames | None) -> dict[str, str | None]:
    """New name -> old name whose state it takes (``None``: start fresh)."""
    if isinstance(renames, MigrateReport):
        # A checkpoint report also pairs buffers (BatchNorm statistics): no optimizer state.
        table: dict[str, str | None] = {o: n for o, n in renames.remapped if o in old}
    else:
        table = dict(renames or {})
    unknown_old = sorted(set(table) - set(old))
    if unknown_old:
        raise ConfigError(
            f"{_WHERE}: renames names {', '.join(unknown_old)}, not old parameters; "
            f"old names: {format_choices(old)}"
        )
    targets = [n for n in table.values() if n is not None]
    unknown_new = sorted(set(targets) - set(new))
    if unknown_new:
        raise ConfigError(
            f"{_WHERE}: renames maps to {', '.join(unknown_new)}, not parameters of the new "
            f"optimizer; new names: {format_choices(new)}"
        )
    dup = _duplicates(targets)
    if dup:
        raise ConfigError(f"{_WHERE}: renames maps several old names to {', '.join(dup)}")
    sources: dict[str, str | None] = {o: o for o in old if o not in table}
    sources.update({n: o for o, n in table.items() if n is not None})
    return sources


def _check_shapes(entry: Any, old: str, new: str, param: torch.Tensor, src: str) -> None:
    """Element-wise state (:mod:`._moments`) must have the new parameter's shape."""
    bad = misfit(entry, param)
    if bad is not None:
        raise CheckpointError(
            f"{_WHERE}: {src}: state {bad[0]!r} of {old} has shape {bad[1]} but {new} "
            f"has shape {tuple(param.shape)}; pass renames={{{old!r}: None}} to start "
            f"{new} from fresh state"
        )


def migrate_optim_state_file(
    src: PathLike,
    dst: PathLike,
    optimizer: torch.optim.Optimizer,
    *,
    model: nn.Module | None = None,
    old_names: Sequence[str] | None = None,
    renames: Renames | None = None,
) -> MigrateReport:
    """Rewrite optimizer state file ``src`` for ``optimizer`` (built over the changed model).

    Each of ``optimizer``'s parameters takes the state of the old parameter of the same name, or
    of the old name that ``renames`` maps to it (``{old: new}``, or the :class:`MigrateReport`
    of :func:`migrate_checkpoint`, whose ``remapped`` pairs are used; ``{old: None}`` leaves an
    old parameter's state out). Parameters without a match start fresh, as a new parameter does.

    Names come from the file and from ``optimizer`` when both were built from
    ``named_parameters()``; otherwise pass ``old_names`` (the old optimizer's parameters in
    order) and ``model`` (to name the new optimizer's parameters). Group options (lr, betas
    ...) are carried group by group when the group count is unchanged, else taken from
    ``optimizer``. ``dst`` (gzip on ``.gz``) is written atomically and loads with
    :func:`load_state_file`; ``src`` is left as it is. The report lists the names carried
    (``unchanged``, ``remapped``), the old state left out (``dropped``) and the new parameters
    starting fresh (``missing``).
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ConfigError(
            f"{_WHERE}: optimizer must be a torch.optim.Optimizer, got {type(optimizer).__name__}"
        )
    if _same_file(src, dst):
        raise CheckpointError(f"{_WHERE}: src and dst are the same file ({src})")
    kind, state = read_state_file(src)
    if kind != state_kind(optimizer):
        raise CheckpointError(
            f"{_WHERE}: {src} holds {kind} state; cannot migrate it to {state_kind(optimizer)}"
        )
    per_param, old_groups, old_ids = _old_layout(state, src)
    old = _old_names(old_groups, len(old_ids), old_names, src)
    new = _new_names(optimizer, model)
    sources = _sources(old, new, renames)
    old_index = dict(zip(old, old_ids, strict=True))
    params = [p for g in optimizer.param_groups for p in g["params"]]

    out = optimizer.state_dict()  # the new layout: group options, indices, names
    moved: dict[int, Any] = {}
    report = MigrateReport()
    for j, (name, param) in enumerate(zip(new, params, strict=True)):
        o = sources.get(name)
        if o is None:
            report.missing.append(name)
            continue
        entry = per_param.get(old_index[o])
        _check_shapes(entry, o, name, param, src)
        if entry is not None:
            moved[j] = entry
        if o == name:
            report.unchanged.append(name)
        else:
            report.remapped.append((o, name))
    used = {sources[n] for n in new if sources.get(n) is not None}
    report.dropped.extend(o for o in old if o not in used)

    if len(old_groups) == len(out["param_groups"]):
        for g_new, g_old in zip(out["param_groups"], old_groups, strict=True):
            g_new.update({k: v for k, v in g_old.items() if k not in ("params", "param_names")})
    out["state"] = moved
    write_state(dst, kind, out)
    return report
