"""Weight initialisation, in place on tensors, like ``torch.nn.init``.

Each function fills ``tensor`` without recording autograd history and returns it, so
``init.xavier_uniform(layer.weight)`` works on a ``Parameter``. They draw from the same
generator calls as their ``torch.nn.init`` counterparts (``xavier_uniform`` ≡
``torch.nn.init.xavier_uniform_``), so a fixed seed gives identical weights. What torch lacks:
explicit ``fan_in`` / ``fan_out`` overrides for tensors whose layout is not torch's
``(out, in, *kernel)``, :func:`uniform_bias` (torch's default ``Linear``/``Conv`` bias rule as a
function), and errors that name the bad argument.

Defaults of torch modules are unchanged: ``Linear``/``Conv`` weights use
``kaiming_uniform(a=√5)`` and biases ``uniform_bias(fan_in)``.
"""

from __future__ import annotations

import math

import torch

from .._errors import ConfigError

__all__ = [
    "calculate_gain",
    "constant",
    "fans",
    "kaiming_normal",
    "kaiming_uniform",
    "normal",
    "orthogonal",
    "trunc_normal",
    "uniform",
    "uniform_bias",
    "xavier_normal",
    "xavier_uniform",
    "zeros",
]

_MODES = ("fan_in", "fan_out")


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """Recommended gain for ``nonlinearity`` (``"relu"``, ``"tanh"``, ``"leaky_relu"`` ...)."""
    try:
        return float(torch.nn.init.calculate_gain(nonlinearity, param))  # type: ignore[arg-type]
    except ValueError as e:
        raise ConfigError(f"calculate_gain: {e}") from None


def fans(tensor: torch.Tensor) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight laid out as torch does: ``(out, in, *kernel)``."""
    if tensor.dim() < 2:
        raise ConfigError(
            f"fan-based init needs a tensor with >= 2 dims (out, in, *kernel), got shape "
            f"{tuple(tensor.shape)}; pass fan_in/fan_out explicitly for other layouts"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _resolve_fans(tensor: torch.Tensor, fan_in: int | None, fan_out: int | None) -> tuple[int, int]:
    if fan_in is None or fan_out is None:
        auto_in, auto_out = fans(tensor)
        fan_in = auto_in if fan_in is None else fan_in
        fan_out = auto_out if fan_out is None else fan_out
    for name, value in (("fan_in", fan_in), ("fan_out", fan_out)):
        if value < 1:
            raise ConfigError(
                f"init: {name} must be >= 1, got {value} (shape {tuple(tensor.shape)})"
            )
    return fan_in, fan_out


def _fill_uniform(
    tensor: torch.Tensor, low: float, high: float, generator: torch.Generator | None
) -> torch.Tensor:
    with torch.no_grad():
        return tensor.uniform_(low, high, generator=generator)


def _fill_normal(
    tensor: torch.Tensor, mean: float, std: float, generator: torch.Generator | None
) -> torch.Tensor:
    with torch.no_grad():
        return tensor.normal_(mean, std, generator=generator)


def xavier_uniform(
    tensor: torch.Tensor,
    gain: float = 1.0,
    *,
    fan_in: int | None = None,
    fan_out: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """U(−a, a) with ``a = gain·√(6 / (fan_in + fan_out))`` (Glorot & Bengio, 2010)."""
    fi, fo = _resolve_fans(tensor, fan_in, fan_out)
    bound = gain * math.sqrt(6.0 / (fi + fo))
    return _fill_uniform(tensor, -bound, bound, generator)


def xavier_normal(
    tensor: torch.Tensor,
    gain: float = 1.0,
    *,
    fan_in: int | None = None,
    fan_out: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """N(0, σ²) with ``σ = gain·√(2 / (fan_in + fan_out))`` (Glorot & Bengio, 2010)."""
    fi, fo = _resolve_fans(tensor, fan_in, fan_out)
    return _fill_normal(tensor, 0.0, gain * math.sqrt(2.0 / (fi + fo)), generator)


def _kaiming_std(
    tensor: torch.Tensor, a: float, mode: str, nonlinearity: str, fan: int | None
) -> float:
    if mode not in _MODES:
        raise ConfigError(f"kaiming init: mode={mode!r}; expected 'fan_in' or 'fan_out'")
    if fan is None:
        fan = fans(tensor)[0 if mode == "fan_in" else 1]
    if fan < 1:
        raise ConfigError(
            f"kaiming init: fan must be >= 1, got {fan} (shape {tuple(tensor.shape)})"
        )
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform(
    tensor: torch.Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    *,
    fan: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """U(−b, b) with ``b = gain·√(3 / fan)`` (He et al., 2015). ``a``: leaky-ReLU slope."""
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, fan)
    return _fill_uniform(tensor, -bound, bound, generator)


def kaiming_normal(
    tensor: torch.Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    *,
    fan: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """N(0, σ²) with ``σ = gain / √fan`` (He et al., 2015). ``a``: leaky-ReLU slope."""
    return _fill_normal(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity, fan), generator)


def orthogonal(
    tensor: torch.Tensor, gain: float = 1.0, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """A (semi-)orthogonal matrix scaled by ``gain`` (Saxe et al., 2013); dims past 1 flattened."""
    if tensor.dim() < 2:
        raise ConfigError(f"orthogonal init needs >= 2 dims, got shape {tuple(tensor.shape)}")
    return torch.nn.init.orthogonal_(tensor, gain, generator=generator)


def trunc_normal(
    tensor: torch.Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """N(mean, std²) truncated to ``[a, b]`` (absolute bounds, as in torch)."""
    if not std > 0:
        raise ConfigError(f"trunc_normal: std must be > 0, got {std}")
    if not a < b:
        raise ConfigError(f"trunc_normal: need a < b, got a={a}, b={b}")
    return torch.nn.init.trunc_normal_(tensor, mean, std, a, b, generator=generator)


def uniform(
    tensor: torch.Tensor,
    low: float = 0.0,
    high: float = 1.0,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """U(low, high)."""
    if not low <= high:
        raise ConfigError(f"uniform init: need low <= high, got low={low}, high={high}")
    return _fill_uniform(tensor, low, high, generator)


def normal(
    tensor: torch.Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """N(mean, std²)."""
    if not std >= 0:
        raise ConfigError(f"normal init: std must be >= 0, got {std}")
    return _fill_normal(tensor, mean, std, generator)


def uniform_bias(
    tensor: torch.Tensor, fan_in: int, *, generator: torch.Generator | None = None
) -> torch.Tensor:
    """U(−1/√fan_in, 1/√fan_in): the bias init torch's ``Linear`` and ``Conv*`` use."""
    if fan_in < 1:
        raise ConfigError(f"uniform_bias: fan_in must be >= 1, got {fan_in}")
    bound = 1.0 / math.sqrt(fan_in)
    return _fill_uniform(tensor, -bound, bound, generator)


def constant(tensor: torch.Tensor, value: float) -> torch.Tensor:
    """Fill with ``value``."""
    with torch.no_grad():
        return tensor.fill_(value)


def zeros(tensor: torch.Tensor) -> torch.Tensor:
    """Fill with zeros."""
    with torch.no_grad():
        return tensor.zero_()
