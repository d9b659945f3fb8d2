"""NaN and stall detection on losses."""

from __future__ import annotations

import math

import pytest

from flodl_core import ConfigError
from flodl_monitor import LossWatch
from flodl_monitor._alerts import is_loss_name


def test_loss_names() -> None:
    assert is_loss_name("loss") and is_loss_name("val.loss") and is_loss_name("decoder.recon_loss")
    assert not is_loss_name("loss_scale.acc") and not is_loss_name("acc")


def test_nan_and_inf_alert_once_per_metric() -> None:
    w = LossWatch("root", patience=0)
    first = w.check(3, {"loss": math.nan, "acc": math.nan, "val.loss": math.inf})
    assert sorted(a.message for a in first) == [
        "loss is NaN at epoch 4",
        "val.loss is inf at epoch 4",
    ]
    assert all(a.kind == "nan_loss" and a.step == 3 for a in first)
    assert w.check(4, {"loss": math.nan}) == []


def test_stall_after_patience_and_rearm_on_improvement() -> None:
    w = LossWatch("root", patience=3)
    assert w.check(0, {"loss": 1.0}) == []
    assert w.check(1, {"loss": 1.0}) == []
    assert w.check(2, {"loss": 1.00001}) == []  # within min_delta: not an improvement
    stalled = w.check(3, {"loss": 1.2})
    assert [a.kind for a in stalled] == ["stalled"]
    assert "not improved for 3 epochs (best 1.0000 at epoch 1)" in stalled[0].message
    assert w.check(4, {"loss": 1.1}) == []  # still stalled: not repeated
    (back,) = w.check(5, {"loss": 0.5})  # improved: reported once, and re-armed
    assert back.kind == "recovered" and back.message == "loss improved again to 0.5000 at epoch 6"
    assert w.check(6, {"loss": 0.4}) == []  # improving further is not news
    for e in range(6, 8):
        assert w.check(e, {"loss": 0.6}) == []
    assert [a.kind for a in w.check(8, {"loss": 0.6})] == ["stalled"]


def test_bad_settings() -> None:
    with pytest.raises(ConfigError, match="patience"):
        LossWatch("root", patience=-1)
    with pytest.raises(ConfigError, match="min_delta"):
        LossWatch("root", min_delta=math.nan)
