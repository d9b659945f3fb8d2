"""Gaussian blur against a direct 2-D convolution written out by hand (float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flodl_core import ConfigError, GaussianBlur, ShapeError, gaussian_blur_2d

NP_MODES = {"zeros": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _hand_blur(x: np.ndarray, sigma: float, radius: int, mode: str) -> np.ndarray:
    """Dense 2-D correlation with the outer-product Gaussian, one pixel at a time."""
    offsets = np.arange(-radius, radius + 1, dtype=np.float64)
    k = np.exp(-(offsets**2) / (2 * sigma * sigma))
    k2 = np.outer(k, k) / k.sum() ** 2
    h, w = x.shape[-2:]
    padded = np.pad(x, ((0, 0), (0, 0), (radius, radius), (radius, radius)), mode=NP_MODES[mode])
    out = np.zeros_like(x)
    for i in range(h):
        for j in range(w):
            window = padded[:, :, i : i + 2 * radius + 1, j : j + 2 * radius + 1]
            out[:, :, i, j] = (window * k2).sum(axis=(-2, -1))
    return out


@pytest.mark.parametrize("mode", list(NP_MODES))
def test_values_match_hand_convolution(mode: str) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 9, 8, dtype=torch.float64, generator=g)
    sigma = 0.9  # radius ceil(2.7) = 3, kernel 7
    expected = _hand_blur(x.numpy(), sigma, 3, mode)
    torch.testing.assert_close(gaussian_blur_2d(x, sigma, padding_mode=mode).numpy(), expected)
    blur = GaussianBlur(sigma, padding_mode=mode).to(torch.float64)
    torch.testing.assert_close(blur(x).numpy(), expected)


def test_explicit_kernel_size_and_unbatched_input() -> None:
    x = torch.randn(1, 6, 6, dtype=torch.float64)
    y = gaussian_blur_2d(x, 2.0, kernel_size=3)
    expected = _hand_blur(x.unsqueeze(0).numpy(), 2.0, 1, "zeros")[0]
    torch.testing.assert_close(y.numpy(), expected)


def test_gradient_matches_finite_differences() -> None:
    x = torch.randn(1, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: gaussian_blur_2d(t, 0.7), (x,))
    assert torch.autograd.gradcheck(
        lambda t: gaussian_blur_2d(t, 0.7, padding_mode="reflect"), (x,)
    )


def test_constant_image_is_preserved_away_from_zero_border() -> None:
    x = torch.ones(1, 1, 12, 12)
    y = gaussian_blur_2d(x, 1.0)
    torch.testing.assert_close(y[..., 3:-3, 3:-3], torch.ones(1, 1, 6, 6))
    assert y[0, 0, 0, 0] < 1.0  # zero padding darkens the corner, as in the original


def test_module_kernel_is_not_checkpointed() -> None:
    blur = GaussianBlur(1.5)
    assert blur.state_dict() == {}
    assert blur.kernel.numel() == 2 * math.ceil(4.5) + 1
    assert abs(float(blur.kernel.sum()) - 1.0) < 1e-6
    assert "kernel_size=11" in repr(blur)


def test_half_precision_input_runs() -> None:
    x = torch.rand(1, 1, 8, 8, dtype=torch.bfloat16)
    assert gaussian_blur_2d(x, 1.0).dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"sigma": 0.0}, "sigma must be"),
        ({"sigma": float("nan")}, "sigma must be"),
        ({"sigma": 1.0, "kernel_size": 4}, "kernel_size must be an odd"),
        ({"sigma": 1.0, "padding_mode": "mirror"}, "padding_mode='mirror'"),
    ],
)
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        gaussian_blur_2d(torch.zeros(1, 1, 8, 8), **kwargs)
    with pytest.raises(ConfigError, match=match):
        GaussianBlur(**kwargs)


def test_bad_shapes() -> None:
    with pytest.raises(ShapeError, match=r"\(B, C, H, W\).*\(8, 8\)"):
        gaussian_blur_2d(torch.zeros(8, 8), 1.0)
    with pytest.raises(ShapeError, match="reflect padding needs"):
        gaussian_blur_2d(torch.zeros(1, 1, 3, 3), 1.0, padding_mode="reflect")
