"""One rule per option: :data:`RULES` maps every field of :class:`~flodl_ddp.TrainerConfig` to
the function that checks and normalises it (a :class:`~flodl_core.ConfigError` names the field).
The builder, :class:`~flodl_ddp.ElCheConfig` and :func:`check_config` all go through it;
:func:`check_config` adds the rules between fields and resolves every default into a
:class:`RunSpec`, the run as the engine reads it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from flodl_core import ConfigError, check_finite, check_int, resolve_device

from ._elastic import ElasticOptions
from ._guards import TrendGuard
from ._modes import Mode, Policy, parse_mode
from ._resume import read_latest

Rule = Callable[[Any], Any]


def _int(name: str, low: int) -> Rule:
    return lambda v: check_int(v, name, ge=low)


def _number(name: str, **bounds: float) -> Rule:
    return lambda v: check_finite(v, name, **bounds)


def _optional(rule: Rule) -> Rule:
    return lambda v: None if v is None else rule(v)


def _must(name: str, ok: Callable[[Any], bool], expected: str, got: Rule = repr) -> Rule:
    """A rule that refuses what ``ok`` rejects: ``{name} must {expected}, got {got(v)}``."""

    def rule(v: Any) -> Any:
        if not ok(v):
            raise ConfigError(f"{name} must {expected}, got {got(v)}")
        return v

    return rule


def _bool(name: str) -> Rule:  # a switch given "no" would read as on
    return _must(name, lambda v: isinstance(v, bool), "be True or False")


def _callable(name: str) -> Rule:
    return _must(name, callable, "be callable", lambda v: f"{type(v).__name__} {v!r}")


def _has(name: str, method: str, what: str) -> Rule:
    has = f"have a {method}() method ({what})"
    return _must(name, lambda v: callable(getattr(v, method, None)), has, type)


def _path(name: str) -> Rule:
    check = _must(name, lambda v: isinstance(v, (str, bytes, os.PathLike)), "be a path")
    return lambda v: os.fsdecode(os.fspath(check(v)))


_monitor = _must(
    "monitor",
    lambda v: callable(getattr(v, "log", None)) and hasattr(v, "records"),
    "be a flodl_monitor.Monitor",
    type,
)
_eval_on = _must(
    "eval_on",
    lambda v: v == "fastest" or (isinstance(v, int) and not isinstance(v, bool) and v >= 0),
    "be 'fastest' or a rank (an int >= 0)",
)
_elastic = _must(
    "elastic", lambda v: isinstance(v, ElasticOptions), "be ElasticOptions (use .elastic(...))"
)


def check_slowdown(v: Any) -> dict[int, float]:
    """``{rank: factor >= 1}`` as a plain dict."""
    if not isinstance(v, Mapping):
        raise ConfigError(f"slowdown must be a dict {{rank: factor}}, got {v!r}")
    return {
        check_int(r, "slowdown rank", ge=0): check_finite(f, f"slowdown[{r}]", ge=1.0)
        for r, f in v.items()
    }


def check_speed_hint(v: Any) -> tuple[int, float]:  # (slow_rank, ratio >= 1)
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise ConfigError(f"speed_hint must be (slow_rank, ratio), got {v!r}")
    return check_int(v[0], "speed_hint rank", ge=0), check_finite(v[1], "speed_hint ratio", ge=1)


def check_ratios(v: Any) -> tuple[float, ...]:  # one share > 0 per rank
    if isinstance(v, (str, bytes)) or not isinstance(v, Sequence) or not v:
        raise ConfigError(f"partition_ratios must be a non-empty list of numbers, got {v!r}")
    return tuple(check_finite(r, f"partition_ratios[{i}]", gt=0) for i, r in enumerate(v))


def normalise_devices(v: Any) -> list[str]:
    """One device string per rank (``resolve_device`` of each entry)."""
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        raise ConfigError(f"devices must be a list (one entry per rank), got {v!r}")
    out = [str(resolve_device(d)) for d in v]
    if not out:
        raise ConfigError("devices is empty; give at least one device (e.g. ['cpu'])")
    return out


_SWITCHES = "bf16_wire shared_memory meta_controller elche_relax_up timeline bind_cores "
_SWITCHES += "find_unused_parameters grad_scaler"
_PATHS = "record_log save_dashboard checkpoint_path resume"
_COUNTS = "batch_size num_epochs min_anchor batches_per_epoch checkpoint_every threads_per_rank"
RULES: dict[str, Rule] = {
    **{name: _bool(name) for name in _SWITCHES.split()},
    **{name: _optional(_int(name, 1)) for name in _COUNTS.split()},  # None: unset / unbounded
    **{name: _optional(_path(name)) for name in _PATHS.split()},
    **{name: _optional(_callable(name)) for name in ("scheduler", "eval_fn", "metrics_fn")},
    "dataset": lambda v: v,  # anything DataLoader reads; required, see check_config
    "mode": lambda v: parse_mode(v) and v,  # kept as given (a name or a Mode)
    "anchor": _int("anchor", 1),
    "max_anchor": _int("max_anchor", 1),
    "overhead_target": _number("overhead_target", ge=0.01, le=0.50),
    "max_batch_diff": _optional(_int("max_batch_diff", 0)),
    "speed_hint": _optional(check_speed_hint),
    "partition_ratios": _optional(check_ratios),
    "max_grad_norm": _optional(_number("max_grad_norm", gt=0.0)),
    "max_overshoot": _optional(_int("max_overshoot", 0)),
    "divergence_threshold": _number("divergence_threshold", gt=0.0),
    "guard": _optional(_has("guard", "report", "TrendGuard, MsfGuard, NoGuard or your own")),
    "easgd_alpha": _optional(_number("easgd_alpha", gt=0.0, le=1.0)),
    "outer_optimizer": _optional(_has("outer_optimizer", "step", "OuterAvg, SlowMo, DiLoCo")),
    "lr_scale_ratio": _optional(_number("lr_scale_ratio", ge=0.0)),
    "seed": _int("seed", 0),
    "num_workers": _int("num_workers", 0),
    "micro_batches": _int("micro_batches", 1),
    "slowdown": _optional(check_slowdown),
    "timeout_s": _number("timeout_s", gt=0.0),
    "reports_per_epoch": _int("reports_per_epoch", 0),
    "eval_on": _eval_on,
    "devices": _optional(normalise_devices),
    "monitor": _optional(_monitor),
    "elastic": _optional(_elastic),
}
"""Field name -> its rule. Every field of TrainerConfig has exactly one."""


def check_option(name: str, value: Any) -> Any:
    """``value`` checked and normalised by the rule of field ``name``."""
    return RULES[name](value)


@dataclass(frozen=True)
class RunSpec:
    """A checked run, as the rank engine reads it (made by :func:`check_config`): a ``None`` means
    what it says (``max_grad_norm=None``: no clipping), never a default still to resolve."""

    dataset: Any
    batch_size: int
    num_workers: int
    micro_batches: int
    num_epochs: int
    mode: Mode
    bf16_wire: bool
    shared_memory: bool
    find_unused_parameters: bool
    anchor: int
    max_anchor: int
    min_anchor: int
    overhead_target: float
    max_batch_diff: int | None
    speed_hint: tuple[int, float] | None
    partition_ratios: tuple[float, ...] | None
    elche_relax_up: bool
    max_grad_norm: float | None
    grad_scaler: bool
    max_overshoot: int | None
    guard: Any
    meta_controller: bool
    easgd_alpha: float | None
    outer_optimizer: Any
    scheduler: Callable[..., Any] | None
    lr_scale_ratio: float
    seed: int
    batches_per_epoch: int | None
    timeline: bool
    slowdown: dict[int, float]
    timeout_s: float
    reports_per_epoch: int
    eval_on: str | int
    eval_fn: Callable[..., Any] | None
    checkpoint_every: int | None
    checkpoint_path: str | None
    resume: str | None
    threads_per_rank: int | None
    bind_cores: bool
    elastic: Any

    @property
    def sync(self) -> bool:
        return self.mode.policy is Policy.SYNC

    def elche_options(self) -> dict[str, Any]:
        """ElChe's keyword options from this run (its anchor goes first, positionally)."""
        names = "overhead_target max_anchor min_anchor max_batch_diff speed_hint partition_ratios"
        return {**{n: getattr(self, n) for n in names.split()}, "relax_up": self.elche_relax_up}

    def lr_scale(self, world: int) -> float:
        """The factor every rank's learning rate is multiplied by: ``1 + ratio · (world - 1)``."""
        return 1.0 + self.lr_scale_ratio * (world - 1)


def check_config(cfg: Any, *, need_epochs: bool = True) -> RunSpec:
    """Every field through its rule, then the rules between fields; the :class:`RunSpec`
    (``need_epochs=False``, the cooperative tier: ``num_epochs`` may be ``None``)."""
    v = {f.name: check_option(f.name, getattr(cfg, f.name)) for f in fields(cfg)}
    mode = v["mode"] = parse_mode(v["mode"])
    if v["dataset"] is None:
        raise ConfigError("dataset is required: call .dataset(ds) (any DataLoader input)")
    for name in ("num_epochs", "batch_size"):
        if v[name] is None and (need_epochs or name == "batch_size"):
            raise ConfigError(f"{name} is required: call .{name}(n)")
    if (parts := v["micro_batches"]) > v["batch_size"]:
        raise ConfigError(f"micro_batches ({parts}) exceeds batch_size ({v['batch_size']})")
    if v["max_anchor"] < v["anchor"]:
        raise ConfigError(f"max_anchor ({v['max_anchor']}) must be >= anchor ({v['anchor']})")
    if v["easgd_alpha"] is not None and mode.name != "cpu-async":
        raise ConfigError(
            f"easgd_alpha applies to mode 'cpu-async' only, but the mode is {mode.name!r}; "
            "drop easgd_alpha or use .mode('cpu-async')"
        )
    if v["checkpoint_every"] is not None and not v["checkpoint_path"]:
        raise ConfigError("checkpoint_every needs a checkpoint_path (a folder)")
    if v["resume"] is not None:
        read_latest(v["resume"])  # a missing or foreign folder fails before any rank starts
    # Sync steps on the pooled batch of every rank, so the linear scaling rule applies (1.0);
    # cadence and async replicas each step on their own batches, as one device would (0.0).
    ratio = v["lr_scale_ratio"]
    resolved = {
        "num_epochs": v["num_epochs"] or 1,
        "min_anchor": v["anchor"] if v["min_anchor"] is None else v["min_anchor"],
        "guard": TrendGuard(v["divergence_threshold"]) if v["guard"] is None else v["guard"],
        "lr_scale_ratio": float(mode.policy is Policy.SYNC) if ratio is None else ratio,
        "slowdown": v["slowdown"] or {},
    }
    return RunSpec(**{f.name: resolved.get(f.name, v.get(f.name)) for f in fields(RunSpec)})


def check_world(spec: RunSpec, world: int, n_samples: int) -> None:
    """The rules that need the number of ranks and the dataset's size."""
    hint = spec.speed_hint[0] if spec.speed_hint is not None else None
    named = [("slowdown", r) for r in spec.slowdown] + [("speed_hint", hint)]
    named += [("eval_on", spec.eval_on if isinstance(spec.eval_on, int) else None)]
    for name, rank in named:
        if rank is not None and rank >= world:
            raise ConfigError(f"{name} names rank {rank} but the world has {world} ranks")
    if spec.partition_ratios is not None and len(spec.partition_ratios) != world:
        raise ConfigError(
            f"partition_ratios has {len(spec.partition_ratios)} entries for {world} ranks; "
            "give one ratio per rank"
        )
    if n_samples < world:
        raise ConfigError(
            f"the dataset has {n_samples} samples, fewer than the {world} ranks; every rank "
            "needs data: use a larger dataset or fewer devices"
        )
    bs = spec.batch_size
    if world == 1 and n_samples < bs:
        raise ConfigError(
            f"the dataset has {n_samples} samples, fewer than batch_size {bs}: not one batch "
            "to train; lower batch_size or use a larger dataset"
        )
    if n_samples // world < bs:
        raise ConfigError(
            f"{n_samples} samples split over {world} ranks give {n_samples // world} per rank, "
            f"less than batch_size {bs}: no rank would get a batch; lower batch_size or use "
            "fewer devices"
        )
