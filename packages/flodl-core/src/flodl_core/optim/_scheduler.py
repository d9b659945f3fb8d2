"""The scheduler protocol: ``lr(step) -> float``, and how a schedule drives an optimizer."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch

from .._checks import check_finite, check_int
from .._errors import ConfigError
from ._lr_control import read_group_lr, write_group_lr


def check_step(step: int, where: str) -> int:
    return check_int(step, "step", ge=0, where=where)


def check_positive(where: str, name: str, value: float) -> float:
    return check_finite(value, name, gt=0, where=where)


def check_non_negative(where: str, name: str, value: float) -> float:
    return check_finite(value, name, ge=0, where=where)


def check_count(where: str, name: str, value: int, minimum: int = 1) -> int:
    return check_int(value, name, ge=minimum, where=where)


class Scheduler(ABC):
    """A learning-rate schedule: a pure function ``lr(step)`` of the 0-based step.

    Schedules hold no optimizer, so they compose (``Warmup(Cosine(...))``, ``MinOf(a, b)``) and
    are driven in one of three ways:

    - ``opt.set_lr(sched.lr(step))`` - every group gets the schedule's lr (floDl (Rust)'s idiom);
    - ``sched.apply(opt, step)`` - every group follows the schedule *relative to its own initial
      lr*: group lr = ``initial_lr · lr(step) / peak_lr``, so a two-group optimizer with lrs
      1e-4 and 1e-3 keeps its 1:10 ratio through warmup and decay;
    - ``torch.optim.lr_scheduler.LambdaLR(opt, sched.factor)`` - the same multiplier handed to
      torch's scheduler machinery.
    """

    @abstractmethod
    def lr(self, step: int) -> float:
        """Learning rate at ``step`` (0-based)."""

    @property
    @abstractmethod
    def peak_lr(self) -> float:
        """The nominal lr the schedule is expressed against (usually its highest)."""

    def factor(self, step: int) -> float:
        """``lr(step) / peak_lr``: the multiplier ``apply`` and ``LambdaLR`` use."""
        return self.lr(step) / self.peak_lr

    def apply(self, optimizer: torch.optim.Optimizer, step: int) -> float:
        """Set every group of ``optimizer`` to ``initial_lr · factor(step)``; returns ``lr(step)``.

        A group's ``initial_lr`` is recorded the first time it is seen (the key torch's own
        schedulers use), so groups keep their ratios.
        """
        lr = self.lr(step)
        f = lr / self.peak_lr
        for group in optimizer.param_groups:
            base = group.setdefault("initial_lr", read_group_lr(group))
            write_group_lr(group, float(base) * f)
        return lr


class MinOf(Scheduler):
    """The lowest of several schedules at each step: ``min(s.lr(step) for s in schedules)``.

    floDl (Rust)'s composition idiom ``min(warmup_cosine.lr(step), plateau.lr())`` as an
    object; any member may be a :class:`Plateau`, whose lr only moves when it observes.
    """

    def __init__(self, *schedules: Scheduler) -> None:
        if not schedules:
            raise ConfigError("MinOf: needs at least one schedule")
        for i, s in enumerate(schedules):
            if not isinstance(s, Scheduler):
                raise ConfigError(
                    f"MinOf: argument {i} is a {type(s).__name__}, expected a Scheduler"
                )
        self.schedules: tuple[Scheduler, ...] = schedules

    def lr(self, step: int) -> float:
        return min(s.lr(step) for s in self.schedules)

    @property
    def peak_lr(self) -> float:
        return min(s.peak_lr for s in self.schedules)

    def __repr__(self) -> str:
        return f"MinOf({', '.join(map(repr, self.schedules))})"

    def state_dict(self) -> dict[str, Any]:
        """States of the members that have one (a Plateau), by position."""
        return {
            str(i): s.state_dict()  # type: ignore[attr-defined]
            for i, s in enumerate(self.schedules)
            if hasattr(s, "state_dict")
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s members; on any error every member is as it was."""
        before = self.state_dict()
        if not isinstance(state, dict) or set(state) != set(before):
            got = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise ConfigError(
                f"MinOf.load_state_dict: expected the states of members {sorted(before)} (the "
                f"ones with a state, by position), got {got}"
            )
        try:
            for key, sub in state.items():
                self.schedules[int(key)].load_state_dict(sub)  # type: ignore[attr-defined]
        except Exception:
            for key, sub in before.items():
                self.schedules[int(key)].load_state_dict(sub)  # type: ignore[attr-defined]
            raise
