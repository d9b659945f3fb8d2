"""CSV columns, the text log, the page template and atomic writes."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
from pathlib import Path

import pytest

from flodl_monitor import EpochRecord, ResourceSample, csv_text, log_text
from flodl_monitor._export import render_page, script_json, write_atomic


def _epochs() -> list[EpochRecord]:
    return [
        EpochRecord(
            0, 3, 0.0494, 0.05, {"loss": 1.5, "acc": 0.25}, ResourceSample(cpu=12.34, ram_used=1024)
        ),
        EpochRecord(
            1,
            3,
            0.025,
            0.08,
            {"loss": 0.38, "val.loss": 0.4},
            ResourceSample(vram_alloc=7, vram_total=5),
        ),
        EpochRecord(
            2, 3, 1.5, 1.6, {"loss": math.nan}, ResourceSample(gpu=81.0, vram_alloc=3, vram_total=5)
        ),
    ]


def test_csv_columns_are_the_union_and_values_go_by_name() -> None:
    rows = list(csv.reader(io.StringIO(csv_text(_epochs()))))
    assert rows[0] == [
        "epoch", "duration_s", "loss", "acc", "val.loss",
        "cpu_pct", "ram_used", "gpu_pct", "vram_alloc", "vram_spill",
    ]  # fmt: skip
    assert rows[1] == ["1", "0.049", "1.50000000", "0.25000000", "", "12.3", "1024", "", "", ""]
    assert rows[2] == ["2", "0.025", "0.38000000", "", "0.40000000", "", "", "", "7", "2"]
    assert rows[3][:3] == ["3", "1.500", "nan"] and rows[3][-3:] == ["81.0", "3", "0"]
    assert csv_text([]) == "epoch,duration_s,cpu_pct,ram_used,gpu_pct,vram_alloc,vram_spill\n"


def test_log_text() -> None:
    text = log_text(_epochs()[:2], 3, 2.8)
    assert text.splitlines() == [
        "# flodl training log",
        "epoch 1/3  loss=1.5000  acc=0.2500  [49ms]",
        "epoch 2/3  loss=0.3800  val.loss=0.4000  [25ms]",
        "# total: 2.8s",
    ]


def test_epoch_json_schema() -> None:
    obj = _epochs()[2].to_json()
    assert obj["epoch"] == 3 and obj["total"] == 3 and obj["metrics"] == {"loss": None}
    assert "eta" not in obj and "gpus" not in obj
    assert obj["resources"] == {"gpu": 81.0, "vram_alloc": 3, "vram_total": 5}
    tiny = EpochRecord(0, 2, 0.1, 0.1, {"lr": 1.234567891e-9}, eta=0.1234).to_json()
    assert tiny["metrics"]["lr"] == 1.2345679e-9 and tiny["eta"] == 0.1


def test_script_json_cannot_close_the_script_tag() -> None:
    evil = {"label": "</script><script>alert(1)</script>", "x": "<!--", "sep": "\u2028"}
    text = script_json(evil)
    assert "</" not in text and "<!--" not in text and "\u2028" not in text
    assert json.loads(text) == evil
    page = render_page({"mode": "archive", **evil}, title="flodl Training Report")
    assert page.count("</script>") == 2  # the injected block and the page's own
    assert "<title>flodl Training Report</title>" in page
    boot = re.search(r"window\.FLODL_BOOT=(.*?);</script>", page)
    assert boot is not None and json.loads(boot.group(1))["label"] == evil["label"]
    with pytest.raises(ValueError):
        script_json({"x": math.nan})


def test_page_is_self_contained() -> None:
    page = render_page({"mode": "live"})
    assert not re.search(r"""(src|href)=["']https?://""", page)
    assert "@import" not in page and "EventSource" in page


def test_write_atomic_replaces_whole_and_keeps_nothing_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "r.html"
    write_atomic(target, "one")
    assert target.read_text() == "one"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    os.chmod(target, 0o600)
    write_atomic(target, "two")
    assert target.read_text() == "two" and stat.S_IMODE(target.stat().st_mode) == 0o600

    with pytest.raises(TypeError):
        write_atomic(target, 3)  # type: ignore[arg-type]
    assert target.read_text() == "two"
    assert [p.name for p in target.parent.iterdir()] == ["r.html"]  # no temp left behind
