"""Small models and fixtures shared by the checkpoint tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn


class Net(nn.Module):
    """Parameters and buffers of several kinds: Linear, BatchNorm (running stats, i64 counter)."""

    def __init__(self, hidden: int = 3) -> None:
        super().__init__()
        self.fc = nn.Linear(4, hidden)
        self.bn = nn.BatchNorm1d(hidden)
        self.head = nn.Linear(hidden, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn(self.fc(x)).relu())


NET_NAMES = [
    "fc.weight",
    "fc.bias",
    "bn.weight",
    "bn.bias",
    "head.weight",
    "head.bias",
    "bn.running_mean",
    "bn.running_var",
    "bn.num_batches_tracked",
]
"""Net's tensor names in checkpoint order: parameters first, then buffers, in module order."""


def raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's values as raw bytes, any dtype (bf16 included), any layout."""
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


@pytest.fixture
def make_net() -> Callable[..., Net]:
    def make(seed: int = 0, hidden: int = 3) -> Net:
        torch.manual_seed(seed)
        net = Net(hidden)
        net.train()
        net(torch.randn(8, 4))  # moves running stats and num_batches_tracked off their defaults
        return net

    return make


@pytest.fixture
def net_names() -> list[str]:
    """:data:`NET_NAMES`, a fresh list per test."""
    return list(NET_NAMES)


@pytest.fixture
def state_bytes() -> Callable[[nn.Module], dict[str, tuple[torch.dtype, tuple[int, ...], bytes]]]:
    """A bit-exact fingerprint of a module's state: name -> (dtype, shape, raw bytes)."""

    def snap(module: nn.Module) -> dict[str, tuple[torch.dtype, tuple[int, ...], bytes]]:
        return {k: (v.dtype, tuple(v.shape), raw_bytes(v)) for k, v in module.state_dict().items()}

    return snap


@pytest.fixture
def to_bytes() -> Callable[[torch.Tensor], bytes]:
    return raw_bytes
