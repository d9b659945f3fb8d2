"""Nested state <-> JSON + tensors."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import torch

from flodl_core import CheckpointError
from flodl_core.checkpoint._tree import flatten, unflatten


def round_trip(obj: Any) -> Any:
    tensors: list[torch.Tensor] = []
    tree = flatten(obj, tensors)
    text = json.dumps(tree, allow_nan=False)  # strict JSON: no NaN/Infinity literals
    return unflatten(json.loads(text), tensors)


def test_optimizer_like_state_round_trips() -> None:
    state = {
        "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.ones(2, 2)}, 1: {}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1], "foreach": None}],
    }
    back = round_trip(state)
    assert list(back["state"]) == [0, 1]
    assert torch.equal(back["state"][0]["exp_avg"], torch.ones(2, 2))
    assert back["param_groups"][0]["betas"] == (0.9, 0.999)
    assert isinstance(back["param_groups"][0]["betas"], tuple)
    assert back["param_groups"][0]["foreach"] is None


def test_special_floats_and_marker_like_keys() -> None:
    obj = {"best": math.inf, "worst": -math.inf, "x": math.nan, "$tuple": 1, "dtype": "y"}
    back = round_trip(obj)
    assert back["best"] == math.inf and back["worst"] == -math.inf and math.isnan(back["x"])
    assert back["$tuple"] == 1 and back["dtype"] == "y"
    assert round_trip({"$tensor": 0, "dtype": "bool"}) == {"$tensor": 0, "dtype": "bool"}


def test_mixed_keys_and_widened_tensors() -> None:
    obj = {(1, "a"): [True, 2, 2.5, "s"], 3.5: torch.tensor([True, False])}
    back = round_trip(obj)
    assert back[(1, "a")] == [True, 2, 2.5, "s"]
    assert back[3.5].dtype is torch.bool and back[3.5].tolist() == [True, False]


def test_unsupported_values_name_their_path() -> None:
    with pytest.raises(CheckpointError, match=r"state\['groups'\]\[0\]\['fn'\] is a function"):
        flatten({"groups": [{"fn": lambda: 0}]}, [])
    with pytest.raises(CheckpointError, match=r"state\['z'\].*complex"):
        flatten({"z": torch.zeros(1, dtype=torch.complex64)}, [])


@pytest.mark.parametrize(
    ("tree", "why"),
    [
        ({"$tensor": 5}, "tensor index 5 out of range"),
        ({"$tensor": True}, "tensor index True"),
        ({"$tensor": 0, "dtype": "complex64"}, "unknown tensor dtype"),
        ({"$tuple": 3}, "must hold a list"),
        ({"$tuple": [], "x": 1}, "unexpected keys"),
        ({"$float": "big"}, "unknown float"),
        ({"$dict": [[1]]}, r"\[key, value\] pairs"),
        ({"$dict": [[[1], 2]]}, "unhashable key"),
    ],
)
def test_malformed_trees(tree: Any, why: str) -> None:
    with pytest.raises(CheckpointError, match=f"malformed state at state.*{why}"):
        unflatten(tree, [torch.zeros(1)])
