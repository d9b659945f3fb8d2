"""Reshape: shape inference, gradients, errors."""

from __future__ import annotations

import pytest
import torch

from flodl_core import ConfigError, Reshape, ShapeError


def test_reshape_keeps_batch_with_minus_one() -> None:
    x = torch.arange(2 * 48, dtype=torch.float32).reshape(2, 48).requires_grad_(True)
    y = Reshape((-1, 3, 4, 4))(x)
    assert y.shape == (2, 3, 4, 4)
    assert torch.equal(y.reshape(2, 48), x.detach())
    y.pow(2).sum().backward()
    torch.testing.assert_close(x.grad, 2 * x.detach())


def test_reshape_accepts_int_and_list() -> None:
    assert Reshape(6)(torch.zeros(2, 3)).shape == (6,)
    assert Reshape([3, 2])(torch.zeros(6)).shape == (3, 2)
    assert "shape=(3, 2)" in repr(Reshape([3, 2]))


@pytest.mark.parametrize("shape", [(-1, -1), (2, -3), ("a", 2)])
def test_reshape_bad_shape(shape) -> None:
    with pytest.raises(ConfigError, match="Reshape"):
        Reshape(shape)


def test_reshape_incompatible_input_names_shapes() -> None:
    with pytest.raises(ShapeError, match=r"input of shape \(2, 5\) \(10 elements\) to \(3, 4\)"):
        Reshape((3, 4))(torch.zeros(2, 5))
