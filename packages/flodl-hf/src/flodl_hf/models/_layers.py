"""Pieces shared by every family: activations, the attention mask, SDPA attention, init."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from flodl_core import ConfigError, format_choices

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh_formula(x: Tensor) -> Tensor:
    # Written out (not F.gelu(approximate="tanh")) to match transformers' gelu_new bit for bit.
    return 0.5 * x * (1.0 + torch.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * torch.pow(x, 3.0))))


def _gelu_fast(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": F.gelu,
    "gelu_python": lambda x: x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0))),
    "gelu_new": _gelu_tanh_formula,
    "gelu_accurate": _gelu_tanh_formula,
    "gelu_python_tanh": _gelu_tanh_formula,
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": _gelu_fast,
    "gelu_10": lambda x: torch.clip(F.gelu(x), -10.0, 10.0),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
    "relu": F.relu,
    "relu6": F.relu6,
    "relu2": lambda x: torch.square(F.relu(x)),
    "silu": F.silu,
    "swish": F.silu,
    "mish": F.mish,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
}


def check_activation(name: object, field: str) -> None:
    """Raise :class:`ConfigError` unless ``name`` is an activation this package implements."""
    if not isinstance(name, str) or name not in _ACTIVATIONS:
        raise ConfigError(
            f"config {field} {name!r} is not supported; expected one of "
            f"{format_choices(_ACTIVATIONS)}"
        )


class Activation(nn.Module):
    """An activation chosen by its HF name (``gelu``, ``gelu_new``, ``relu`` ...)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        check_activation(name, "activation")
        self.name = name
        self._fn = _ACTIVATIONS[name]

    def forward(self, x: Tensor) -> Tensor:
        return self._fn(x)

    def extra_repr(self) -> str:
        return self.name


def additive_mask(attention_mask: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """``attention_mask: (B, S)`` of 1 (attend) / 0 (padding) -> additive ``(B, 1, 1, S)``.

    Masked keys get ``finfo(dtype).min`` as transformers does (not ``-inf``: a fully masked row
    then stays finite instead of turning into NaN).
    """
    if attention_mask is None:
        return None
    if attention_mask.dim() != 2:
        from flodl_core import ShapeError

        raise ShapeError(
            f"attention_mask must be (batch, seq), got shape {tuple(attention_mask.shape)}"
        )
    keep = attention_mask[:, None, None, :].to(torch.bool)
    zero = torch.zeros((), dtype=dtype, device=attention_mask.device)
    return torch.where(keep, zero, torch.finfo(dtype).min)


def split_heads(x: Tensor, heads: int) -> Tensor:
    """``x: (B, S, H*D) -> (B, H, S, D)``."""
    b, s, _ = x.shape
    return x.view(b, s, heads, -1).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``x: (B, H, S, D) -> (B, S, H*D)``."""
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)


def sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float) -> Tensor:
    """Softmax attention, ``q, k, v: (B, H, S, D)``, ``mask`` additive ``(B, 1, 1, S)``."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)


def attend(
    q: Tensor, k: Tensor, v: Tensor, heads: int, mask: Tensor | None, dropout: float
) -> Tensor:
    """Multi-head softmax attention over projected ``q, k, v: (B, S, H*D)`` -> ``(B, S, H*D)``;
    ``mask`` additive ``(B, 1, 1, S)``."""
    q, k, v = (split_heads(t, heads) for t in (q, k, v))
    return merge_heads(sdpa(q, k, v, mask, dropout))


@torch.no_grad()
def init_parameter(owner: nn.Module, name: str, std: float) -> None:
    """Initialise ``owner.<name>`` as transformers does for a fresh model.

    Linear / conv / embedding weights: normal(0, std) (an embedding's padding row zero);
    LayerNorm weights: one; every bias, including the bare output ``bias`` of MLM heads: zero.
    """
    p = getattr(owner, name)
    if isinstance(owner, nn.LayerNorm):
        p.fill_(1.0 if name == "weight" else 0.0)
    elif name == "bias":
        p.zero_()
    else:
        p.normal_(0.0, std)
        if isinstance(owner, nn.Embedding) and owner.padding_idx is not None:
            p[owner.padding_idx].zero_()


def init_weights(module: nn.Module, std: float) -> None:
    """Initialise every parameter of ``module`` (see :func:`init_parameter`)."""
    for owner in module.modules():
        for name, _ in owner.named_parameters(recurse=False):
            init_parameter(owner, name, std)
