"""Workspace-wide pytest hooks: the ``gpu`` marker skips where no CUDA device is present."""

from __future__ import annotations

import os

import pytest

# Tests never reach the network: a hub lookup without this hangs for tens of seconds first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device; none is available")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
