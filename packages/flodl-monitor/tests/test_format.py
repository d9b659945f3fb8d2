"""The console format, character for character (flodl-semantics 7.2)."""

from __future__ import annotations

import math

import pytest

from flodl_monitor import epoch_line, finish_line, format_bytes, format_eta, format_metric
from flodl_monitor._format import format_vram


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0"),
        (1e-4, "1.00e-4"),
        (-2.5e-7, "-2.50e-7"),
        (0.00099, "9.90e-4"),
        (0.001, "0.0010"),
        (1.52638, "1.5264"),
        (-3.0, "-3.0000"),
        (99.99991, "99.9999"),
        (100.0, "100.00"),
        (12345.678, "12345.68"),
        (math.nan, "NaN"),
        (math.inf, "inf"),
        (-math.inf, "-inf"),
    ],
)
def test_format_metric(value: float, text: str) -> None:
    assert format_metric(value) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (-1.0, "—"),
        (math.nan, "—"),
        (0.0, "0ms"),
        (0.049, "49ms"),
        (0.9999, "999ms"),
        (1.0, "1s"),
        (4.8, "4.8s"),
        (5.03, "5s"),
        (59.95, "59.9s"),
        (60.0, "1m 00s"),
        (125.7, "2m 05s"),
        (3599.0, "59m 59s"),
        (3600.0, "1h 00m"),
        (3780.0, "1h 03m"),
        (90000.0, "25h 00m"),
    ],
)
def test_format_eta(seconds: float, text: str) -> None:
    assert format_eta(seconds) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1 KB"),
        (1536, "2 KB"),
        (5 * 2**20, "5 MB"),
        (int(2.1 * 2**30), "2.1 GB"),
        (6 * 2**30, "6.0 GB"),
    ],
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text


def test_epoch_line_pads_epoch_to_total_width_and_shows_eta() -> None:
    line = epoch_line(0, 100, {"loss": 1.52638}, 0.049, 4.8)
    assert line == "  epoch   1/100  loss=1.5264  [49ms  ETA 4.8s]"


def test_epoch_line_last_epoch_has_no_eta() -> None:
    assert (
        epoch_line(99, 100, {"loss": 0.0012}, 0.023, None) == "  epoch 100/100  loss=0.0012  [23ms]"
    )


def test_epoch_line_vram_used_over_total_and_gpu_util() -> None:
    alloc = int(2.1 * 2**30)
    line = epoch_line(
        9, 100, {"loss": 0.3817}, 0.025, 2.2, vram_alloc=alloc, vram_total=6 * 2**30, gpu_util=82.4
    )
    assert line == "  epoch  10/100  loss=0.3817  [25ms  ETA 2.2s]  VRAM: 2.1/6.0 GB (82%)"
    spilled = epoch_line(0, 9, {}, 1.0, None, vram_alloc=7 * 2**30, vram_total=6 * 2**30)
    assert spilled == "  epoch 1/9  [1s]  VRAM: 7.0/6.0 GB +1.0 GB spill"
    unknown = epoch_line(0, 9, {}, 1.0, None, vram_alloc=alloc, vram_total=None, gpu_util=50.0)
    assert unknown == "  epoch 1/9  [1s]  VRAM: 2.1 GB (50%)"
    assert epoch_line(0, 9, {}, 1.0, None, gpu_util=50.0) == "  epoch 1/9  [1s]"


@pytest.mark.parametrize(
    ("alloc", "total", "text"),
    [
        (int(2.1 * 2**30), 6 * 2**30, "2.1/6.0 GB"),
        (512 * 2**20, 6 * 2**30, "0.5/6.0 GB"),  # the total's unit, so columns line up
        (0, 24 * 2**30, "0.0/24.0 GB"),
        (300 * 2**20, 512 * 2**20, "300/512 MB"),
        (3 * 2**10, 8 * 2**10, "3/8 KB"),
        (100, 900, "100/900 B"),
        (int(6.5 * 2**30), 6 * 2**30, "6.5/6.0 GB +512 MB spill"),
        (int(2.1 * 2**30), None, "2.1 GB"),
        (int(2.1 * 2**30), 0, "2.1 GB"),  # a zero total means unknown, not "/0"
    ],
)
def test_format_vram(alloc: int, total: int | None, text: str) -> None:
    assert format_vram(alloc, total) == text


def test_epoch_line_color_only_adds_ansi_around_the_same_text() -> None:
    plain = epoch_line(1, 10, {"loss": 0.5, "acc": 0.9}, 0.1, 1.0)
    styled = epoch_line(1, 10, {"loss": 0.5, "acc": 0.9}, 0.1, 1.0, color=True)
    assert "\x1b[" in styled and "\x1b[" not in plain
    assert styled.replace("\x1b[1m", "").replace("\x1b[2m", "").replace("\x1b[0m", "") == plain


def test_finish_line() -> None:
    assert finish_line(2.8, {"loss": 0.0012}) == "  training complete in 2.8s  | loss: 0.0012"
    assert finish_line(0.5, {}) == "  training complete in 500ms"
