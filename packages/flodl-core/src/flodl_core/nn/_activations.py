"""Activations torch lacks: the tanh-approximated GELU under its own name."""

from __future__ import annotations

from torch import nn

from .._errors import ConfigError

_APPROXIMATIONS = ("none", "tanh")


class GELU(nn.GELU):
    """``torch.nn.GELU`` (exact erf form by default) with a ``GELU.tanh()`` shortcut.

    A subclass, so ``isinstance(m, torch.nn.GELU)`` holds and state dicts, ``torch.compile``
    and hooks see the torch module. ``x: (*)`` -> ``(*)``.
    """

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in _APPROXIMATIONS:
            raise ConfigError(
                f"GELU: approximate={approximate!r} is not supported; expected 'none' or 'tanh'"
            )
        super().__init__(approximate=approximate)

    @classmethod
    def tanh(cls) -> GELU:
        """The tanh approximation ``0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` (GPT-2, BERT)."""
        return cls(approximate="tanh")


class GeluApprox(GELU):
    """``GELU(approximate="tanh")`` as its own class, the name floDl (Rust) uses."""

    def __init__(self) -> None:
        super().__init__(approximate="tanh")
