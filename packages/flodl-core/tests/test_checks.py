"""check_int / check_finite / check_path / format_choices: what passes, and the messages they
build."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

import flodl_core as fc
from flodl_core import ConfigError, check_finite, check_int, check_path, format_choices


@pytest.mark.parametrize(
    ("value", "expected"),
    [(3, 3), (np.int64(4), 4), (torch.tensor(5), 5), (0, 0)],
)
def test_check_int_accepts_integers_of_any_kind(value: object, expected: int) -> None:
    out = check_int(value, "n", ge=0)
    assert out == expected and type(out) is int


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (True, {"gt": 0}, "batch_size must be an int > 0, got True"),
        (2.0, {"gt": 0}, "batch_size must be an int > 0, got 2.0"),
        ("3", {}, "batch_size must be an int, got '3'"),
        (0, {"ge": 1}, "batch_size must be an int >= 1, got 0"),
        (10, {"ge": 0, "le": 9}, "batch_size must be an int in 0..9, got 10"),
        (
            -1,
            {"ge": 0, "note": "0 disables"},
            "batch_size must be an int >= 0 (0 disables), got -1",
        ),
        (5, {"lt": 5}, "batch_size must be an int < 5, got 5"),
        (9, {"gt": 0, "le": 8}, "batch_size must be an int > 0 and <= 8, got 9"),
    ],
)
def test_check_int_messages(value: object, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_int(value, "batch_size", **kwargs)
    assert str(info.value) == message


def test_where_prefixes_the_message() -> None:
    with pytest.raises(ConfigError, match=r"^DataLoader: seed must be an int >= 0, got -2$"):
        check_int(-2, "seed", ge=0, where="DataLoader")
    with pytest.raises(ConfigError, match=r"^focal_loss: gamma must be a finite number >= 0"):
        check_finite(-0.5, "gamma", ge=0, where="focal_loss")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), (0.25, 0.25), (np.float32(0.5), 0.5), (torch.tensor(2.0), 2.0)],
)
def test_check_finite_accepts_real_numbers(value: object, expected: float) -> None:
    out = check_finite(value, "lr", ge=0)
    assert out == expected and type(out) is float


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (math.nan, {"gt": 0}, "sigma must be a finite number > 0, got nan"),
        (math.inf, {}, "sigma must be a finite number, got inf"),
        (False, {}, "sigma must be a finite number, got False"),
        ("0.1", {}, "sigma must be a finite number, got '0.1'"),
        (None, {"ge": 0}, "sigma must be a finite number >= 0, got None"),
        (0.0, {"gt": 0}, "sigma must be a finite number > 0, got 0.0"),
        (1.5, {"ge": -1, "le": 1}, "sigma must be a finite number in [-1, 1], got 1.5"),
        (0.5, {"gt": 0.5}, "sigma must be a finite number > 0.5, got 0.5"),
        (torch.ones(2), {}, "sigma must be a finite number, got tensor([1., 1.])"),
    ],
)
def test_check_finite_messages(value: object, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_finite(value, "sigma", **kwargs)
    assert str(info.value) == message


def test_format_choices_is_sorted_and_says_none() -> None:
    assert format_choices(["b", "a", 3]) == "3, a, b"
    assert format_choices([]) == "(none)"
    assert fc.format_choices is format_choices


def test_format_choices_can_keep_a_meaningful_order() -> None:
    assert format_choices(["quiet", "normal", "debug"], sort=False) == "quiet, normal, debug"
    assert format_choices((), sort=False) == "(none)"


def test_expected_replaces_the_generated_phrase() -> None:
    with pytest.raises(ConfigError) as info:
        check_int(0, "top_k", ge=1, expected="a positive integer")
    assert str(info.value) == "top_k must be a positive integer, got 0"
    with pytest.raises(ConfigError, match=r"^p must be a probability, got 2\.0$"):
        check_finite(2.0, "p", ge=0, le=1, expected="a probability")


def test_check_path_takes_str_and_pathlike_and_returns_a_str(tmp_path: Path) -> None:
    assert check_path("a/b.fdl", "path") == "a/b.fdl"
    assert check_path(tmp_path / "m.fdl", "path") == str(tmp_path / "m.fdl")


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (
            None,
            {"where": "save_checkpoint"},
            "save_checkpoint: path must be a str or os.PathLike, got NoneType None",
        ),
        (3, {"note": "a file name"}, "path must be a str or os.PathLike (a file name), got int 3"),
        (b"m.fdl", {"expected": "a folder"}, "path must be a folder, got bytes b'm.fdl'"),
    ],
)
def test_check_path_messages(value: object, kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_path(value, "path", **kwargs)
    assert str(info.value) == message


def test_check_path_cuts_a_long_value_short() -> None:
    with pytest.raises(ConfigError) as info:
        check_path(list(range(100)), "path")
    assert str(info.value).endswith("got list " + repr(list(range(100)))[:60])
