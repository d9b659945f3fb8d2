"""Mode names, parsing and errors."""

from __future__ import annotations

import pytest

from flodl_core import ConfigError
from flodl_ddp import MODES, Backend, Mode, Policy, parse_mode


def test_six_modes_in_order() -> None:
    assert MODES == (
        "nccl-sync",
        "nccl-cadence",
        "nccl-async",
        "cpu-sync",
        "cpu-cadence",
        "cpu-async",
    )


def test_mode_name_is_derived() -> None:
    m = Mode(Policy.ASYNC, Backend.CPU)
    assert m.name == "cpu-async" and str(m) == "cpu-async"
    assert m == parse_mode("cpu-async")
    with pytest.raises(AttributeError):
        m.policy = Policy.SYNC  # type: ignore[misc]


@pytest.mark.parametrize("text", ["cpu-async", "cpu_async", "CPU-Async", " Cpu_ASYNC "])
def test_spellings(text: str) -> None:
    assert parse_mode(text) == Mode(Policy.ASYNC, Backend.CPU)


def test_every_name_round_trips() -> None:
    for name in MODES:
        m = parse_mode(name)
        assert m.name == name
        assert parse_mode(m) is m
    assert parse_mode("nccl-cadence").policy is Policy.CADENCE
    assert parse_mode("nccl-cadence").backend is Backend.NCCL


@pytest.mark.parametrize("bad", ["gloo-sync", "cpu", "cadence", "", "cpu-cadence-x", "nccl sync"])
def test_unknown_lists_all_six(bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_mode(bad)
    msg = str(e.value)
    assert repr(bad) in msg
    for name in MODES:
        assert name in msg


def test_wrong_types() -> None:
    with pytest.raises(ConfigError, match="mode must be"):
        parse_mode(3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="policy"):
        Mode("sync", Backend.CPU)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="backend"):
        Mode(Policy.SYNC, "cpu")  # type: ignore[arg-type]
