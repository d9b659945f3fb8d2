"""``Optimizer.with_groups(...).group(params, lr=...).build()``: parameter groups, checked."""

from __future__ import annotations

import inspect
from typing import Any, Generic, TypeVar

import torch

from .._errors import ConfigError, format_choices
from ._lr_control import check_lr
from ._params import ParamsLike, describe, named_params

OptT = TypeVar("OptT", bound=torch.optim.Optimizer)

# Constructor arguments that are not per-group hyper-parameters.
_NOT_OPTIONS = frozenset({"self", "params"})


def option_names(cls: type[torch.optim.Optimizer]) -> frozenset[str]:
    """Keyword arguments ``cls`` accepts besides ``params`` (its hyper-parameters)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is torch.optim.Optimizer or klass is object:
            continue
        for p in inspect.signature(init).parameters.values():
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                names.add(p.name)
    return frozenset(names - _NOT_OPTIONS)


def check_options(cls: type[torch.optim.Optimizer], options: dict[str, Any], where: str) -> None:
    valid = option_names(cls)
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ConfigError(
            f"{where}: unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(unknown)} for {cls.__name__}; valid: {format_choices(valid)}"
        )


def check_values(cls: type[torch.optim.Optimizer], options: dict[str, Any], where: str) -> None:
    """Let ``cls`` judge ``options`` as its constructor does: torch checks ``betas``, ``eps``,
    ``weight_decay`` ... there, and never again for a group's own dict."""
    try:
        cls([torch.zeros(1, requires_grad=True)], **options)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{where}: {e}") from None


class GroupBuilder(Generic[OptT]):
    """Collects parameter groups for optimizer class ``OptT``; ``build()`` makes the optimizer.

    ``defaults`` apply to every group unless the group overrides them. Errors (unknown option,
    a value the optimizer refuses, an empty group, a parameter in two groups) are raised at the
    ``group`` call that causes them, naming the group by index and the parameter by name where
    known.
    """

    def __init__(self, cls: type[OptT], defaults: dict[str, Any]) -> None:
        check_options(cls, defaults, f"{cls.__name__}.with_groups")
        if "lr" in defaults:
            defaults["lr"] = check_lr(defaults["lr"], f"{cls.__name__}.with_groups")
        self._cls = cls
        self._defaults = defaults
        self._groups: list[tuple[list[tuple[str | None, torch.Tensor]], dict[str, Any]]] = []
        self._owner: dict[int, tuple[int, str | None]] = {}  # id(param) -> (group, name)

    def group(
        self, params: ParamsLike, lr: float | None = None, **options: Any
    ) -> GroupBuilder[OptT]:
        """Add a group of ``params`` (module, Parameters or named pairs) with its own options."""
        index = len(self._groups)
        where = f"{self._cls.__name__} group {index}"
        named = named_params(params, where)
        if not named:
            raise ConfigError(
                f"{where}: no parameters (empty iterable, or a module without parameters); "
                "every group needs at least one"
            )
        check_options(self._cls, options, where)
        if lr is not None:
            options["lr"] = check_lr(lr, where)
        check_values(self._cls, {**self._defaults, **options}, where)
        seen_here: set[int] = set()
        for name, p in named:
            key = id(p)
            if key in seen_here:
                raise ConfigError(f"{where}: {describe(name, p)} is listed twice")
            seen_here.add(key)
            if key in self._owner:
                other, other_name = self._owner[key]
                raise ConfigError(
                    f"{where}: {describe(name or other_name, p)} is already in group {other}; "
                    "a parameter may belong to one group only"
                )
        for name, p in named:
            self._owner[id(p)] = (index, name)
        self._groups.append((named, options))
        return self

    def build(self) -> OptT:
        """The optimizer, with one ``param_groups`` entry per ``group`` call, in call order."""
        if not self._groups:
            raise ConfigError(
                f"{self._cls.__name__}.with_groups(): build() called before any group(...)"
            )
        # torch keeps names (group["param_names"]) only when every group has them.
        all_named = all(name is not None for named, _ in self._groups for name, _ in named)
        groups: list[dict[str, Any]] = []
        for named, options in self._groups:
            params = list(named) if all_named else [p for _, p in named]
            groups.append({"params": params, **options})
        return self._cls(groups, **self._defaults)

    def __len__(self) -> int:
        return len(self._groups)
