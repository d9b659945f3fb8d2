"""Monotone decays: step, exponential, multi-step and cosine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import ConfigError
from ._scheduler import Scheduler, check_count, check_non_negative, check_positive, check_step


@dataclass(frozen=True)
class StepDecay(Scheduler):
    """``base_lr · gamma^⌊step / step_size⌋`` (torch's ``StepLR``)."""

    base_lr: float
    step_size: int
    gamma: float = 0.1

    def __post_init__(self) -> None:
        check_positive("StepDecay", "base_lr", self.base_lr)
        check_count("StepDecay", "step_size", self.step_size)
        check_positive("StepDecay", "gamma", self.gamma)

    def lr(self, step: int) -> float:
        return self.base_lr * self.gamma ** (check_step(step, "StepDecay") // self.step_size)

    @property
    def peak_lr(self) -> float:
        return self.base_lr


@dataclass(frozen=True)
class Exponential(Scheduler):
    """``base_lr · gamma^step`` (torch's ``ExponentialLR``)."""

    base_lr: float
    gamma: float

    def __post_init__(self) -> None:
        check_positive("Exponential", "base_lr", self.base_lr)
        check_positive("Exponential", "gamma", self.gamma)

    def lr(self, step: int) -> float:
        return self.base_lr * self.gamma ** check_step(step, "Exponential")

    @property
    def peak_lr(self) -> float:
        return self.base_lr


@dataclass(frozen=True)
class MultiStep(Scheduler):
    """``base_lr · gamma^(number of milestones <= step)`` (torch's ``MultiStepLR``).

    Milestones are sorted; a repeated milestone decays twice, as in torch.
    """

    base_lr: float
    milestones: Sequence[int]
    gamma: float = 0.1

    def __post_init__(self) -> None:
        check_positive("MultiStep", "base_lr", self.base_lr)
        check_positive("MultiStep", "gamma", self.gamma)
        ms = tuple(sorted(check_count("MultiStep", "milestone", m, 0) for m in self.milestones))
        object.__setattr__(self, "milestones", ms)

    def lr(self, step: int) -> float:
        s = check_step(step, "MultiStep")
        passed = sum(1 for m in self.milestones if m <= s)
        return self.base_lr * self.gamma**passed

    @property
    def peak_lr(self) -> float:
        return self.base_lr


@dataclass(frozen=True)
class Cosine(Scheduler):
    """``min_lr + ½(base_lr − min_lr)(1 + cos(π·min(step, total)/total))`` (Loshchilov & Hutter).

    Holds ``min_lr`` after ``total`` steps (torch's ``CosineAnnealingLR`` would rise again).
    """

    base_lr: float
    total: int
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        check_positive("Cosine", "base_lr", self.base_lr)
        check_count("Cosine", "total", self.total)
        check_non_negative("Cosine", "min_lr", self.min_lr)
        if self.min_lr > self.base_lr:
            raise ConfigError(
                f"Cosine: min_lr {self.min_lr} is above base_lr {self.base_lr}; a cosine "
                "schedule decays from base_lr to min_lr"
            )

    def lr(self, step: int) -> float:
        t = min(check_step(step, "Cosine"), self.total) / self.total
        return self.min_lr + 0.5 * (self.base_lr - self.min_lr) * (1.0 + math.cos(math.pi * t))

    @property
    def peak_lr(self) -> float:
        return self.base_lr
