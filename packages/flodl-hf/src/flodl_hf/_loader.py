"""Strict, all-or-nothing loading of HF weights into a module, with HF's key conventions.

Every checkpoint key is first mapped onto a model key:

- legacy ``LayerNorm.gamma`` / ``.beta`` become ``.weight`` / ``.bias`` (only when the new name is
  a model key and the old one is not: a module's own ``gamma`` parameter keeps its name);
- a checkpoint saved from a bare backbone (``embeddings.*``) gets the model's prefix (``bert.``);
- keys the family declares ignorable (old ``position_ids`` buffers, tied decoder copies) drop.

Then three buckets are checked: *missing* model keys, *unexpected* checkpoint keys and
*mismatched* shapes. Keys of heads the model does not have (a pre-training checkpoint's ``cls.*``
loaded for classification) are *unused*, which is allowed and reported; a head the checkpoint
lacks entirely is *initialised* fresh. Anything in the three error buckets raises
:class:`~flodl_core.CheckpointError` listing them, and the module is left untouched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from flodl_core import CheckpointError, ConfigError

from ._weights import read_weights

_MAX_LISTED = 20


@dataclass(frozen=True)
class KeyPolicy:
    """How one model family's keys relate to checkpoint keys.

    ``prefix``: the backbone's name in task models (``"bert"``); ``roots``: the backbone's
    top-level children (``embeddings``, ``encoder`` ...) as they appear in a bare-backbone file;
    ``optional``: model key prefixes that may be freshly initialised when a checkpoint lacks
    them all (heads, the pooler); ``ignore``: regexes of checkpoint keys dropped silently;
    ``tied``: model keys that are filled by weight tying, never read from the file.
    """

    prefix: str = ""
    roots: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    ignore: tuple[str, ...] = (r"(^|\.)position_ids$",)
    tied: tuple[str, ...] = ()

    def unused_ok(self, key: str) -> bool:
        """Whether a checkpoint key the model lacks may be left unused (a foreign head)."""
        if not self.prefix:
            return False
        return not key.startswith(self.prefix + ".") or key.startswith(f"{self.prefix}.pooler")


@dataclass
class WeightLoadReport:
    """What a load of HF weights did (or, when it raised, would have done).

    Named apart from :class:`flodl_core.checkpoint.LoadReport` (``.fdl`` checkpoints), whose
    fields differ: this one also reports renamed, unused, ignored and initialised keys.
    """

    loaded: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    mismatched: list[tuple[str, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    unused: list[str] = field(default_factory=list)
    initialized: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def summary(self) -> str:
        lines = [f"{len(self.loaded)} tensors loaded"]
        for title, items in (
            ("missing from the checkpoint", self.missing),
            ("unexpected in the checkpoint", self.unexpected),
            (
                "shape mismatches (checkpoint vs model)",
                [f"{k}: {tuple(a)} vs {tuple(b)}" for k, a, b in self.mismatched],
            ),
            ("unused checkpoint keys (heads this model does not have)", self.unused),
            ("newly initialised (absent from the checkpoint)", self.initialized),
        ):
            if items:
                lines.append(f"{len(items)} {title}:")
                lines.extend(f"  {k}" for k in items[:_MAX_LISTED])
                if len(items) > _MAX_LISTED:
                    lines.append(f"  ... and {len(items) - _MAX_LISTED} more")
        return "\n".join(lines)


def plan_load(
    expected: Mapping[str, tuple[int, ...]],
    state: Mapping[str, Tensor],
    policy: KeyPolicy | None = None,
) -> tuple[dict[str, Tensor], WeightLoadReport]:
    """Map checkpoint ``state`` onto the ``expected`` model keys (name -> shape); no side effects.

    Returns the tensors to load under model names and the report (check ``report.ok``).
    """
    policy = policy or KeyPolicy()
    report = WeightLoadReport()
    ignore = [re.compile(p) for p in policy.ignore]
    bare = bool(policy.prefix) and not any(k.startswith(policy.prefix + ".") for k in state)
    mapped: dict[str, Tensor] = {}
    for key, tensor in state.items():
        if not isinstance(tensor, Tensor):
            raise CheckpointError(
                f"state[{key!r}] is {type(tensor).__name__}; a state dict maps names to tensors"
            )
        target = _map_key(key, expected, policy, bare)
        if target is None:
            if any(p.search(key) for p in ignore):
                report.ignored.append(key)
            elif policy.unused_ok(key):
                report.unused.append(key)
            else:
                report.unexpected.append(key)
            continue
        if target != key:
            report.renamed[key] = target
        if target in mapped:
            report.unexpected.append(key)  # two checkpoint names for one model key
            continue
        want = tuple(expected[target])
        if tuple(tensor.shape) != want:
            report.mismatched.append((target, tuple(tensor.shape), want))
            continue
        mapped[target] = tensor
    seen = set(mapped) | {k for k, _, _ in report.mismatched} | set(policy.tied)
    _classify_absent([k for k in expected if k not in seen], expected, policy, report)
    report.loaded = sorted(mapped)
    report.missing.sort()
    report.unexpected.sort()
    report.unused.sort()
    return mapped, report


def _classify_absent(
    absent: list[str],
    expected: Mapping[str, tuple[int, ...]],
    policy: KeyPolicy,
    report: WeightLoadReport,
) -> None:
    """Sort model keys the checkpoint lacks into ``report.missing`` or ``report.initialized``.

    A head the checkpoint lacks as a whole (an optional group) starts fresh; a partial one is an
    error, as is any other absent key.
    """
    by_group: dict[str, list[str]] = {}
    for key in absent:
        group = next((g for g in policy.optional if key.startswith(g)), None)
        if group is None:
            report.missing.append(key)
        else:
            by_group.setdefault(group, []).append(key)
    for group, keys in by_group.items():
        total = [k for k in expected if k.startswith(group) and k not in policy.tied]
        if len(keys) == len(total):
            report.initialized.extend(keys)
        else:
            report.missing.extend(keys)


def _map_key(key: str, expected: Mapping[str, object], policy: KeyPolicy, bare: bool) -> str | None:
    candidates = [key]
    if bare and key.split(".", 1)[0] in policy.roots:
        candidates.insert(0, f"{policy.prefix}.{key}")
    for cand in candidates:
        if cand in expected:
            return cand
        for old, new in ((".gamma", ".weight"), (".beta", ".bias")):
            if cand.endswith(old):
                renamed = cand[: -len(old)] + new
                if renamed in expected:
                    return renamed
    return None


def expected_keys(module: nn.Module) -> dict[str, tuple[int, ...]]:
    """Persistent state names of ``module`` and their shapes (tied tensors listed under each)."""
    return {k: tuple(v.shape) for k, v in module.state_dict(keep_vars=True).items()}


def _kind(t: Tensor) -> str:
    return "complex" if t.is_complex() else "floating" if t.is_floating_point() else "integer"


def check_kinds(module: nn.Module, mapped: Mapping[str, Tensor], where: str) -> None:
    """Refuse checkpoint tensors whose kind (floating, complex, integer/bool) differs from the
    model's: torch would cast them silently, or fail half-way through an ``assign=True`` load
    with some parameters already replaced."""
    own = module.state_dict(keep_vars=True)
    bad = [
        f"  {k}: {v.dtype} vs {own[k].dtype}"
        for k, v in mapped.items()
        if k in own and _kind(v) != _kind(own[k])
    ]
    if bad:
        listed = "\n".join(bad[:_MAX_LISTED])
        raise CheckpointError(
            f"cannot load{where}: {len(bad)} tensors of the wrong kind (checkpoint vs model); "
            f"nothing was loaded:\n{listed}"
        )


def load_weights(
    module: nn.Module,
    source: str | Path | Mapping[str, Tensor],
    policy: KeyPolicy | None = None,
    *,
    assign: bool = False,
) -> WeightLoadReport:
    """Load a weight file, model folder or state dict into ``module``, all or nothing.

    Raises :class:`~flodl_core.CheckpointError` listing missing, unexpected and shape-mismatched
    keys (up to 20 per bucket), or tensors of another kind than the module's (integer weights
    for a float parameter), before touching the module. With ``assign=True`` the checkpoint's
    tensors become the parameters (zero-copy from the memory map, file dtype kept); otherwise
    values are copied into the existing parameters, which keep their identity and dtype.
    """
    if not isinstance(source, str | Path | Mapping):
        raise ConfigError(
            f"source must be a weight file, a model folder or a state dict, got "
            f"{type(source).__name__}"
        )
    state = read_weights(source) if isinstance(source, str | Path) else source
    mapped, report = plan_load(expected_keys(module), state, policy)
    where = f" from {source}" if isinstance(source, str | Path) else ""
    if not report.ok:
        raise CheckpointError(f"cannot load weights{where}:\n{report.summary()}")
    check_kinds(module, mapped, f" weights{where}")
    with torch.no_grad():
        module.load_state_dict(mapped, strict=False, assign=assign)
    return report
