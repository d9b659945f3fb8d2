from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from flodl_core import CheckpointError
from flodl_core.checkpoint._module import module_tensors


def test_params_first_then_buffers_in_module_order(
    make_net: Callable[..., nn.Module], net_names: list[str]
) -> None:
    names = [name for name, _ in module_tensors(make_net())]
    assert names == net_names
    assert set(names) == set(make_net().state_dict())


def test_tied_weights_keep_every_name_and_non_persistent_buffers_are_left_out() -> None:
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(2, 2, bias=False)
            self.b = nn.Linear(2, 2, bias=False)
            self.b.weight = self.a.weight
            self.register_buffer("cache", torch.zeros(2), persistent=False)

    assert [n for n, _ in module_tensors(Tied())] == ["a.weight", "b.weight"]


def test_non_tensor_state_is_refused() -> None:
    class Extra(nn.Linear):
        def get_extra_state(self) -> dict[str, int]:
            return {"v": 1}

        def set_extra_state(self, state: object) -> None:
            pass

    with pytest.raises(CheckpointError, match="'_extra_state' is a dict, not a tensor"):
        module_tensors(Extra(2, 2))


def test_only_modules_are_accepted() -> None:
    with pytest.raises(CheckpointError, match=r"expected a torch\.nn\.Module, got dict"):
        module_tensors({})  # type: ignore[arg-type]
