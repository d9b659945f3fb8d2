"""Optimizers with parameter groups, composable schedulers, clipping and mixed precision.

The optimizers are torch's own classes (subclasses adding groups and lr control); the
schedulers are pure functions of the step that drive any optimizer; ``GradScaler`` and
``autocast`` are torch's.
"""

from ._amp import GradScaler as GradScaler
from ._amp import autocast as autocast
from ._amp import cast_parameters as cast_parameters
from ._clip import clip_grad_norm as clip_grad_norm
from ._clip import clip_grad_value as clip_grad_value
from ._cyclic import Cyclic as Cyclic
from ._cyclic import OneCycle as OneCycle
from ._decay import Cosine as Cosine
from ._decay import Exponential as Exponential
from ._decay import MultiStep as MultiStep
from ._decay import StepDecay as StepDecay
from ._groups import GroupBuilder as GroupBuilder
from ._lr_control import GroupIndexError as GroupIndexError
from ._optimizers import SGD as SGD
from ._optimizers import Adagrad as Adagrad
from ._optimizers import Adam as Adam
from ._optimizers import AdamW as AdamW
from ._optimizers import FlodlOptimizer as FlodlOptimizer
from ._optimizers import NAdam as NAdam
from ._optimizers import RAdam as RAdam
from ._optimizers import RMSprop as RMSprop
from ._plateau import Plateau as Plateau
from ._scheduler import MinOf as MinOf
from ._scheduler import Scheduler as Scheduler
from ._warmup import Warmup as Warmup

#: floDl (Rust)'s names for the three schedulers whose names changed.
CosineScheduler = Cosine
WarmupScheduler = Warmup
PlateauScheduler = Plateau

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "Cosine",
    "CosineScheduler",
    "Cyclic",
    "Exponential",
    "FlodlOptimizer",
    "GradScaler",
    "GroupBuilder",
    "GroupIndexError",
    "MinOf",
    "MultiStep",
    "NAdam",
    "OneCycle",
    "Plateau",
    "PlateauScheduler",
    "RAdam",
    "RMSprop",
    "Scheduler",
    "StepDecay",
    "Warmup",
    "WarmupScheduler",
    "autocast",
    "cast_parameters",
    "clip_grad_norm",
    "clip_grad_value",
]
