"""Activations against transformers' ACT2FN; the mask; RoBERTa positions."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from flodl_core import ConfigError, ShapeError
from flodl_hf.models import Activation, additive_mask, roberta_position_ids

NAMES = [
    "gelu",
    "gelu_new",
    "gelu_fast",
    "gelu_pytorch_tanh",
    "gelu_python",
    "gelu_accurate",
    "gelu_10",
    "quick_gelu",
    "relu",
    "relu6",
    "relu2",
    "silu",
    "swish",
    "mish",
    "tanh",
    "sigmoid",
    "linear",
]


@pytest.mark.parametrize("name", NAMES)
def test_activation_parity(name: str, transformers: Any) -> None:
    from transformers.activations import ACT2FN

    x = torch.linspace(-12, 12, 1001)
    assert torch.allclose(Activation(name)(x), ACT2FN[name](x), atol=1e-6, rtol=0)


def test_unknown_activation() -> None:
    with pytest.raises(ConfigError, match="'wiggle' is not supported; expected one of"):
        Activation("wiggle")


def test_additive_mask() -> None:
    m = additive_mask(torch.tensor([[1, 1, 0]]), torch.float16)
    assert m.shape == (1, 1, 1, 3) and m.dtype == torch.float16
    assert m[0, 0, 0].tolist() == [0.0, 0.0, torch.finfo(torch.float16).min]
    assert additive_mask(None, torch.float32) is None
    with pytest.raises(ShapeError, match=r"\(batch, seq\)"):
        additive_mask(torch.ones(2, 1, 3), torch.float32)


def test_roberta_positions_start_after_padding() -> None:
    ids = torch.tensor([[0, 5, 6, 2, 1, 1], [0, 7, 2, 1, 1, 1]])
    assert roberta_position_ids(ids, 1).tolist() == [[2, 3, 4, 5, 1, 1], [2, 3, 4, 1, 1, 1]]
