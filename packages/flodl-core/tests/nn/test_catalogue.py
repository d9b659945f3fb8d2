"""Every module, activation and norm that floDl (Rust)'s README and the semantics list name
is importable."""

from __future__ import annotations

import pytest
import torch

import flodl_core
from flodl_core import nn as fnn

# floDl (Rust)'s README "PyTorch Parity" table and semantics §6, by category.
MODULES = [
    "Identity",
    "Linear",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "MaxPool1d",
    "MaxPool2d",
    "AvgPool1d",
    "AvgPool2d",
    "AdaptiveMaxPool2d",
    "AdaptiveAvgPool2d",
    "PixelShuffle",
    "PixelUnshuffle",
    "Upsample",
    "Unfold",
    "Fold",
    "ZeroPad2d",
    "ReflectionPad2d",
    "Flatten",
    "Dropout",
    "Dropout2d",
    "AlphaDropout",
    "Embedding",
    "EmbeddingBag",
    "GRUCell",
    "GRU",
    "LSTMCell",
    "LSTM",
    "Bilinear",
    "MultiheadAttention",
    "GaussianBlur",
    "Reshape",
    "StateAdd",
]
NORMS = ["LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm", "BatchNorm2d", "InstanceNorm"]
ACTIVATIONS = [
    "ReLU",
    "Sigmoid",
    "Tanh",
    "GELU",
    "GeluApprox",
    "SiLU",
    "LeakyReLU",
    "ELU",
    "Softplus",
    "Mish",
    "SELU",
    "Hardswish",
    "Hardsigmoid",
    "PReLU",
    "Softmax",
    "LogSoftmax",
]
FUNCTIONS = [
    "gaussian_blur_2d",
    "max_pool2d",
    "adaptive_avg_pool2d",
    "grid_sample",
    "scaled_dot_product_attention",
    "embedding",
    "embedding_bag",
]
# What torch lacks, so flodl defines it.
OWN = {"GELU", "GeluApprox", "GaussianBlur", "Reshape", "StateAdd", "InstanceNorm"}


@pytest.mark.parametrize("name", MODULES + NORMS + ACTIVATIONS)
def test_module_importable_and_constructible_class(name: str) -> None:
    cls = getattr(flodl_core, name)
    assert name in flodl_core.__all__ and name in fnn.__all__
    assert issubclass(cls, torch.nn.Module)
    if name not in OWN and name != "BatchNorm":
        assert cls is getattr(torch.nn, name), f"{name} must be torch's own class, not a wrapper"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_importable(name: str) -> None:
    assert callable(getattr(flodl_core, name))
    assert name in flodl_core.__all__


def test_aliases_and_subclasses_keep_torch_identity() -> None:
    assert flodl_core.BatchNorm is torch.nn.BatchNorm1d
    assert issubclass(flodl_core.GELU, torch.nn.GELU)
    assert issubclass(flodl_core.GeluApprox, torch.nn.GELU)
    assert flodl_core.init is fnn.init


def test_all_names_resolve() -> None:
    for name in fnn.__all__:
        assert getattr(fnn, name) is getattr(flodl_core, name)
    assert len(set(fnn.__all__)) == len(fnn.__all__)
