"""The callables a run hands to the trainer: model and optimizer factories, the LR schedule, the
train step and the evaluation. Each is a frozen dataclass naming its model, so it pickles to
spawned ranks and rebuilds what it needs there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flodl_core.optim import Cosine, MultiStep, Scheduler, Warmup

from .data import load_dataset
from .models import SPECS

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2023, 0.1994, 0.2010)
EVAL_BATCH = 500
LM_EVAL_WINDOWS = 512
"""Validation windows of 128 characters the text models are scored on (the first ones)."""


def normalize_cifar(x: Tensor) -> Tensor:
    """x: (B, 3, H, W) in [0, 1] -> per-channel standardised."""
    mean = torch.tensor(CIFAR_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


def augment_cifar(x: Tensor) -> Tensor:
    """Pad 4 (zeros), random 32x32 crop and random horizontal flip, one draw for the whole
    batch (cheaper than per-image and what the reference does). x: (B, 3, 32, 32)."""
    padded = F.pad(x, (4, 4, 4, 4))
    i, j = (int(v) for v in torch.randint(0, 9, (2,)))
    out = padded[:, :, i : i + 32, j : j + 32]
    if bool(torch.rand(()) < 0.5):
        out = out.flip(3)
    return out


@dataclass(frozen=True)
class ModelFactory:
    """``factory() -> nn.Module``: a fresh ``model``."""

    model: str
    vocab: int | None = None

    def __call__(self) -> nn.Module:
        return SPECS[self.model].make(self.vocab)


def _params(target: nn.Module | Iterable[Any]) -> list[Any]:
    return list(target.parameters()) if isinstance(target, nn.Module) else list(target)


@dataclass(frozen=True)
class OptimFactory:
    """``factory(model or its parameters) -> torch.optim.Optimizer`` with the settings of the
    README's Models table."""

    model: str

    def __call__(self, target: nn.Module | Iterable[Any]) -> torch.optim.Optimizer:
        spec = SPECS[self.model]
        params = _params(target)
        if spec.optimizer == "sgd":
            return torch.optim.SGD(
                params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay
            )
        if spec.optimizer == "rmsprop":
            return torch.optim.RMSprop(params, lr=spec.lr)
        return torch.optim.Adam(params, lr=spec.lr)


def schedule_for(model: str, total_steps: int) -> Scheduler | None:
    """The schedule of the README's Models table over ``total_steps`` global batches (``None``: a
    flat lr)."""
    spec = SPECS[model]
    total = max(int(total_steps), 1)
    if spec.schedule == "multistep":  # x0.1 at 50 % and 75 % of the run
        return MultiStep(spec.lr, [max(total // 2, 1), max(total * 3 // 4, 1)], gamma=0.1)
    if spec.schedule == "warmup-cosine":  # warmup over 20 %, then cosine down to 1e-5
        warm = max(total // 5, 1)
        return Warmup(Cosine(spec.lr, max(total - warm, 1), min_lr=1e-5), warm)
    return None


@dataclass(frozen=True)
class SchedFactory:
    """``factory(optimizer, total_steps) -> Scheduler``, driven by the trainer's global step."""

    model: str

    def __call__(self, optimizer: torch.optim.Optimizer, total_steps: int) -> Scheduler:
        schedule = schedule_for(self.model, total_steps)
        if schedule is None:
            raise ValueError(f"{self.model} trains at a flat lr; it has no schedule")
        return schedule


def loss_of(task: str, model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """The training loss of a task on one batch: x, y as the dataset gives them."""
    if task == "recon":
        return F.mse_loss(model(x), x)
    logits = model(x)
    if task == "lm":  # logits (B, T, V), y (B, T)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    return F.cross_entropy(logits, y)


@dataclass(frozen=True)
class TrainStep:
    """``step(model, batch) -> loss``; CIFAR batches are augmented and normalised first."""

    model: str

    def __call__(self, model: nn.Module, batch: Sequence[Tensor]) -> Tensor:
        spec = SPECS[self.model]
        x, y = batch[0], batch[1]
        if spec.dataset == "cifar10":
            x = normalize_cifar(augment_cifar(x) if spec.augment else x)
        return loss_of(spec.task, model, x, y)


@torch.no_grad()
def evaluate(model: nn.Module, task: str, dataset: str, test: Sequence[Tensor]) -> float:
    """Accuracy in % (classify), mean token CE (lm) or mean MSE (recon) on ``test``."""
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    x_all, y_all = test[0], test[1]
    total, score = 0, 0.0
    try:
        for s in range(0, x_all.shape[0], EVAL_BATCH):
            x, y = x_all[s : s + EVAL_BATCH].to(device), y_all[s : s + EVAL_BATCH].to(device)
            if dataset == "cifar10":
                x = normalize_cifar(x)
            if task == "classify":
                score += float((model(x).argmax(1) == y).sum())
                total += y.shape[0]
            elif task == "lm":
                logits = model(x)
                ce = F.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), y.reshape(-1), reduction="sum"
                )
                score += float(ce)
                total += y.numel()
            else:
                score += float(F.mse_loss(model(x), x, reduction="sum"))
                total += x.numel()
    finally:
        model.train(was_training)
    return 100.0 * score / total if task == "classify" else score / total


@dataclass(frozen=True)
class EvalFn:
    """``eval_fn(model) -> float`` on the held-out split, loaded once per process."""

    model: str
    data_dir: str
    download: bool = False

    def __call__(self, model: nn.Module) -> float:
        spec = SPECS[self.model]
        bundle = load_dataset(spec.dataset, self.data_dir, download=self.download)
        x, y = bundle.test.tensors[0], bundle.test.tensors[1]
        if spec.task == "lm":
            x, y = x[:LM_EVAL_WINDOWS], y[:LM_EVAL_WINDOWS]
        return evaluate(model, spec.task, spec.dataset, (x, y))
