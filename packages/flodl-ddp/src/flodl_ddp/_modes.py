"""The six training modes, ``"<backend>-<policy>"``: where to average times when to average.

Backends: ``nccl`` averages the device's own tensors (NCCL on CUDA, gloo on CPU tensors); ``cpu``
averages CPU copies over gloo (across GPU vendors, through tunnels). Policies: ``sync`` averages
gradients after every batch; ``cadence`` averages parameters when the slowest rank has run its
``anchor`` batches and the others their proportional counts (ElChe); ``async`` is cadence where fast
ranks may overshoot their counts until every rank is ready.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from flodl_core import ConfigError


class Policy(enum.Enum):
    """When the ranks average."""

    SYNC = "sync"
    CADENCE = "cadence"
    ASYNC = "async"


class Backend(enum.Enum):
    """Where the averaging runs: on the device tensors (``NCCL``) or on CPU copies (``CPU``)."""

    NCCL = "nccl"
    CPU = "cpu"


@dataclass(frozen=True)
class Mode:
    """One of the six modes; ``name`` is derived (``"cpu-async"`` for ``CPU``, ``ASYNC``)."""

    policy: Policy
    backend: Backend
    name: str = field(init=False)

    def __post_init__(self) -> None:
        for name, kind in (("policy", Policy), ("backend", Backend)):
            if not isinstance(value := getattr(self, name), kind):
                names = ", ".join(m.name for m in kind)
                raise ConfigError(f"Mode {name} must be a {kind.__name__} ({names}), got {value!r}")
        object.__setattr__(self, "name", f"{self.backend.value}-{self.policy.value}")

    def __str__(self) -> str:
        return self.name


MODES: tuple[str, ...] = tuple(f"{b.value}-{p.value}" for b in Backend for p in Policy)
"""The six mode names, NCCL first, each backend in the order sync, cadence, async."""


def parse_mode(mode: str | Mode) -> Mode:
    """A :class:`Mode` from its name: ``"cpu-async"``, ``"cpu_async"``, ``"CPU-Async"``
    (case-insensitive, ``-`` or ``_``); a :class:`Mode` passes through unchanged; anything else
    is a :class:`ConfigError` that lists the six names."""
    if isinstance(mode, Mode):
        return mode
    if not isinstance(mode, str):
        raise ConfigError(
            f"mode must be a mode name or a Mode, got {type(mode).__name__} {mode!r}; "
            f"valid names: {', '.join(MODES)}"
        )
    backend, _, policy = mode.strip().lower().replace("_", "-").partition("-")
    try:
        return Mode(Policy(policy), Backend(backend))
    except ValueError:
        raise ConfigError(
            f"unknown mode {mode!r}; valid names: {', '.join(MODES)} "
            "('_' may replace '-', case does not matter)"
        ) from None
