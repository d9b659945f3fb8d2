"""Gaussian blur as a separable depthwise convolution (torch has none outside torchvision)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .._checks import check_finite
from .._errors import ConfigError, ShapeError, format_choices

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


def _check(sigma: float, kernel_size: int | None, padding_mode: str) -> int:
    """Validate the arguments; returns the kernel radius."""
    check_finite(sigma, "sigma", gt=0, where="gaussian blur")
    if padding_mode not in _PADDING_MODES:
        raise ConfigError(
            f"gaussian blur: padding_mode={padding_mode!r}; "
            f"expected one of {format_choices(_PADDING_MODES, sort=False)}"
        )
    if kernel_size is None:
        # 2·⌈3σ⌉ + 1 covers ±3σ (99.7 % of the mass), OpenCV's and floDl (Rust)'s default.
        return math.ceil(3.0 * sigma)
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ConfigError(
            f"gaussian blur: kernel_size must be an odd int >= 1, got {kernel_size!r}"
        )
    return kernel_size // 2


def gaussian_kernel_1d(
    sigma: float,
    radius: int,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Normalised 1-D Gaussian weights ``exp(-x²/2σ²) / Σ`` at ``x = -r..r``: ``(2r+1,)``."""
    x = torch.arange(-radius, radius + 1, dtype=torch.float64, device=device)
    w = torch.exp(-(x * x) / (2.0 * sigma * sigma))
    # Built in float64 then cast, so a float16 kernel still sums to 1 as closely as it can.
    return (w / w.sum()).to(dtype or torch.get_default_dtype())


def _blur(x: torch.Tensor, kernel: torch.Tensor, radius: int, padding_mode: str) -> torch.Tensor:
    if x.dim() not in (3, 4):
        raise ShapeError(
            f"gaussian blur: input must be (B, C, H, W) or (C, H, W), got shape {tuple(x.shape)}"
        )
    unbatched = x.dim() == 3
    if unbatched:
        x = x.unsqueeze(0)
    c = x.shape[1]
    if padding_mode == "reflect" and radius >= min(x.shape[-2], x.shape[-1]):
        raise ShapeError(
            f"gaussian blur: reflect padding needs H and W > radius {radius}, got {tuple(x.shape)}"
        )
    k = kernel.to(dtype=x.dtype, device=x.device)
    kw = k.view(1, 1, 1, -1).expand(c, 1, 1, k.numel())  # (C, 1, 1, K): horizontal pass
    kh = k.view(1, 1, -1, 1).expand(c, 1, k.numel(), 1)  # (C, 1, K, 1): vertical pass
    if padding_mode == "zeros":
        y = F.conv2d(x, kw, padding=(0, radius), groups=c)
        y = F.conv2d(y, kh, padding=(radius, 0), groups=c)
    else:
        y = F.conv2d(F.pad(x, (radius, radius, 0, 0), mode=padding_mode), kw, groups=c)
        y = F.conv2d(F.pad(y, (0, 0, radius, radius), mode=padding_mode), kh, groups=c)
    return y.squeeze(0) if unbatched else y


def gaussian_blur_2d(
    x: torch.Tensor,
    sigma: float,
    kernel_size: int | None = None,
    padding_mode: str = "zeros",
) -> torch.Tensor:
    """Blur every channel of ``x: (B, C, H, W)`` or ``(C, H, W)`` with a Gaussian of std ``sigma``.

    Two 1-D depthwise convolutions (horizontal then vertical), differentiable with respect to
    ``x``. ``kernel_size`` defaults to ``2·⌈3σ⌉ + 1``; ``padding_mode`` is ``"zeros"`` (floDl
    (Rust)'s border) or ``"reflect"`` / ``"replicate"`` / ``"circular"``. Output shape = input
    shape.
    """
    radius = _check(sigma, kernel_size, padding_mode)
    kernel = gaussian_kernel_1d(sigma, radius, dtype=x.dtype, device=x.device)
    return _blur(x, kernel, radius, padding_mode)


class GaussianBlur(nn.Module):
    """Module form of :func:`gaussian_blur_2d`; the kernel is built once and kept as a buffer.

    The buffer is non-persistent (derived from ``sigma``), so it is absent from ``state_dict()``
    and the module checkpoints as parameter-free. ``x: (B, C, H, W)`` -> ``(B, C, H, W)``.
    """

    kernel: torch.Tensor

    def __init__(
        self, sigma: float, kernel_size: int | None = None, padding_mode: str = "zeros"
    ) -> None:
        super().__init__()
        self.radius = _check(sigma, kernel_size, padding_mode)
        self.sigma = float(sigma)
        self.padding_mode = padding_mode
        self.register_buffer("kernel", gaussian_kernel_1d(sigma, self.radius), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _blur(x, self.kernel, self.radius, self.padding_mode)

    def extra_repr(self) -> str:
        return (
            f"sigma={self.sigma}, kernel_size={2 * self.radius + 1}, "
            f"padding_mode={self.padding_mode!r}"
        )
