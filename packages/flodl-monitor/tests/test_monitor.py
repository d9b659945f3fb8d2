"""Monitor: console lines, inputs, alerts, identity of observable models, reports."""

from __future__ import annotations

import datetime
import io
import json
import logging
import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from flodl_core import ConfigError, Observable, Verbosity, set_verbosity
from flodl_monitor import Monitor, ResourceSampler


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeGraph(torch.nn.Module):
    """Duck-typed like a flodl graph: Observable plus label, hash, svg."""

    label = "encoder"

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(3, 4)
        self.b = torch.nn.Linear(4, 2)
        self.b.weight.requires_grad_(False)
        self.value = 1.0

    def latest_metrics(self) -> dict[str, float]:
        return {"loss": self.value, "encoder.scan.loss": self.value / 2}

    def short_hash(self) -> str:
        return "a1b2c3d4e5f6"

    def svg(self) -> str:
        return '<svg xmlns="http://www.w3.org/2000/svg"><text>graph</text></svg>'


def _monitor(
    total: int = 3, stream: io.StringIO | None = None, **kw: Any
) -> tuple[Monitor, io.StringIO]:
    out = stream if stream is not None else io.StringIO()
    sampler = ResourceSampler(gpus=[])
    return Monitor(total, stream=out, resources=sampler, **kw), out


def test_plain_lines_when_not_a_terminal() -> None:
    m, out = _monitor(3)
    m.log(0, 0.049, {"loss": 1.52638})
    m.log(1, datetime.timedelta(milliseconds=25), {"loss": 0.3817})
    m.log(2, 0.023, {"loss": 0.0012})
    m.finish()
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"  epoch 1/3  loss=1\.5264  \[49ms  ETA \S+\]", lines[0])
    assert lines[1].startswith("  epoch 2/3  loss=0.3817  [25ms  ETA ")
    assert lines[2] == "  epoch 3/3  loss=0.0012  [23ms]"
    assert re.fullmatch(r"  training complete in \S+  \| loss: 0\.0012", lines[3])
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_terminal_gets_styling_and_no_color_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    m, out = _monitor(2, Tty())
    m.log(0, 0.1, {"loss": 1.0})
    assert "\x1b[1mloss\x1b[0m=1.0000" in out.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    m.log(1, 0.1, {"loss": 1.0})
    assert "\x1b" not in out.getvalue().splitlines()[1]


def test_first_eta_is_the_epoch_duration_times_the_epochs_left() -> None:
    # (the rule with a fake clock: test_eta.py)
    m, _ = _monitor(10)
    rec = m.log(0, 0.5, {"loss": 1.0})
    assert rec.eta == pytest.approx(0.5 * 9)
    assert m.log(9, 0.5, {"loss": 1.0}).eta is None


def test_quiet_verbosity_silences_lines_but_not_alerts() -> None:
    m, out = _monitor(3)
    set_verbosity(Verbosity.QUIET)
    try:
        m.log(0, 0.1, {"loss": math.nan})
    finally:
        set_verbosity(Verbosity.NORMAL)
    assert out.getvalue() == "  ! nan_loss: loss is NaN at epoch 1\n"


def test_observable_model_metrics_identity_and_extras() -> None:
    g = FakeGraph()
    assert isinstance(g, Observable)
    m, _ = _monitor(2)
    rec = m.log(0, 0.1, g)
    assert rec.metrics == {"loss": 1.0, "encoder.scan.loss": 0.5}
    rec = m.log(1, 0.1, model=g, metrics={"lr": 0.01})
    assert list(rec.metrics) == ["loss", "encoder.scan.loss", "lr"]
    boot = m._boot("live")
    assert boot["label"] == "encoder" and boot["hash"] == "a1b2c3d4e5f6"
    assert boot["parameters"] == {"total": 12 + 4 + 8 + 2, "trainable": 12 + 4 + 2, "frozen": 8}
    assert m.graph_svg() is None  # svg is rendered by watch(), not on every log
    m.watch(g)
    assert "<svg" in (m.graph_svg() or "")


def test_dict_and_tensor_values() -> None:
    m, _ = _monitor(1)
    rec = m.log(0, 0.1, {"loss": torch.tensor(0.25), "n": 3})
    assert rec.metrics == {"loss": 0.25, "n": 3.0}


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((5, 0.1, {"loss": 1.0}), {}, r"epoch must be an int in 0\.\.2"),
        ((-1, 0.1, {"loss": 1.0}), {}, "epoch must be"),
        ((True, 0.1, {"loss": 1.0}), {}, "epoch must be"),
        ((0, -0.1, {"loss": 1.0}), {}, "elapsed must be finite"),
        ((0, math.inf, {"loss": 1.0}), {}, "elapsed must be finite"),
        ((0, "1s", {"loss": 1.0}), {}, "elapsed must be seconds"),
        ((0, 0.1, {"loss": "high"}), {}, "'loss' is 'high'"),
        ((0, 0.1, {1: 1.0}), {}, "non-empty strings"),
        ((0, 0.1, {}), {}, "needs metrics"),
        ((0, 0.1), {}, "needs metrics"),
        ((0, 0.1, object()), {}, "latest_metrics"),
    ],
)
def test_bad_log_calls_name_the_problem(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    m, _ = _monitor(3)
    with pytest.raises(ConfigError, match=match):
        m.log(*args, **kwargs)
    assert m.history == []


def test_epochs_must_increase_and_log_after_finish_is_refused() -> None:
    m, _ = _monitor(3)
    m.log(1, 0.1, {"loss": 1.0})
    with pytest.raises(ConfigError, match="epochs must increase"):
        m.log(1, 0.1, {"loss": 1.0})
    m.finish()
    m.finish()  # idempotent
    with pytest.raises(ConfigError, match="after finish"):
        m.log(2, 0.1, {"loss": 1.0})


def test_bad_constructor_arguments() -> None:
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ConfigError, match="total_epochs"):
            Monitor(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="record path"):
        Monitor(3, record_path="../x", resources=False)
    for bad in ({}, "runs/records"):
        with pytest.raises(ConfigError, match="records must be a RecordTree"):
            Monitor(3, records=bad, resources=False)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="stall patience must be an int >= 0"):
        Monitor(3, stall_patience=-1, resources=False)


def test_alerts_print_once_and_reach_records() -> None:
    m, out = _monitor(20, stall_patience=3)
    m.log(0, 0.1, {"loss": 1.0})
    for e in range(1, 6):
        m.log(e, 0.1, {"loss": 1.0})
    m.log(6, 0.1, {"loss": math.inf})
    m.log(7, 0.1, {"loss": math.nan})
    text = out.getvalue()
    assert text.count("! stalled: loss has not improved for 3 epochs") == 1
    assert text.count("! nan_loss: loss is inf at epoch 7") == 1 and "NaN at epoch 8" not in text
    assert [a.kind for a in m.alerts] == ["stalled", "nan_loss"]
    assert [a["kind"] for a in m.records.node("root")["alerts"]] == ["stalled", "nan_loss"]
    assert m.history[-1].to_json()["metrics"]["loss"] is None


def test_epochs_are_records_at_the_record_path() -> None:
    m, _ = _monitor(3)
    m.log(0, 0.1, {"loss": 2.0})
    m.log(1, 0.1, {"loss": 1.0})
    assert [r["metrics"]["loss"] for r in m.records.history("root")] == [2.0, 1.0]
    other, _ = _monitor(3, record_path=None)
    other.log(0, 0.1, {"loss": 2.0})
    other.records.publish("root/host-a/rank0", {"loss": 1.0})  # ranks own the tree
    assert other.records.node("root")["kind"] == "interior"


def _boot_of(html: str) -> dict[str, Any]:
    m = re.search(r"window\.FLODL_BOOT=(.*?);</script>", html)
    assert m is not None
    return json.loads(m.group(1))


def test_save_html_bakes_everything_and_finish_rewrites_it(tmp_path: Path) -> None:
    m, _ = _monitor(3)
    m.watch(FakeGraph())
    m.set_metadata({"optimizer": "adam"})
    m.log(0, 0.1, {"loss": 2.0})
    report = m.save_html(tmp_path / "report.html")
    early = _boot_of(report.read_text())
    assert early["mode"] == "archive" and len(early["epochs"]) == 1 and early["complete"] is None
    m.log(1, 0.1, {"loss": 1.0})
    m.finish()
    boot = _boot_of(report.read_text())
    assert [e["epoch"] for e in boot["epochs"]] == [1, 2]
    assert boot["complete"]["epochs"] == 2 and "<svg" in boot["svg"]
    assert boot["label"] == "encoder" and boot["meta"] == {"optimizer": "adam"}
    assert boot["tree"]["root"]["history"][1]["metrics"] == {"loss": 1.0}
    assert "<title>flodl Training Report</title>" in report.read_text()
    dash = _boot_of(m.save_dashboard(tmp_path / "dash.html").read_text())
    assert dash["view"] == "records"


def test_csv_log_and_record_log_files(tmp_path: Path) -> None:
    m, _ = _monitor(2)
    log = m.record_log(tmp_path / "records")
    with pytest.raises(ConfigError, match="already logging"):
        m.record_log(tmp_path / "other")
    m.log(0, 0.1, {"loss": 2.0, "acc": 0.5})
    m.log(1, 0.1, {"loss": 1.0, "acc": 0.75})
    m.finish()
    assert log.file_for("root") == tmp_path / "records" / "root.jsonl"
    steps = [
        json.loads(x)["step"] for x in (tmp_path / "records/root.jsonl").read_text().splitlines()
    ]
    assert steps == [0, 1]
    m.export_csv(tmp_path / "m.csv")
    assert (
        (tmp_path / "m.csv")
        .read_text()
        .splitlines()[0]
        .startswith("epoch,duration_s,loss,acc,cpu_pct")
    )
    m.write_log(tmp_path / "m.log")
    assert (tmp_path / "m.log").read_text().splitlines()[
        1
    ] == "epoch 1/2  loss=2.0000  acc=0.5000  [100ms]"


def test_context_manager_finishes(caplog: pytest.LogCaptureFixture) -> None:
    out = io.StringIO()
    with Monitor(1, stream=out, resources=False) as m:
        m.log(0, 0.1, {"loss": 1.0})
    assert "training complete" in out.getvalue()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_keep_serving_waits_then_stops() -> None:
    out = io.StringIO()
    m = Monitor(2, stream=out, resources=False)
    m.keep_serving(timeout=0.01)  # no server: returns at once
    url = m.serve(0)
    m.log(0, 0.1, {"loss": 1.0})
    m.keep_serving(timeout=0.2)
    assert m.url is None  # stopped after the wait
    assert f"dashboard still serving at {url} for 0.2 s; press Ctrl-C to stop" in out.getvalue()


def test_ctrl_c_mid_run_writes_the_partial_report(tmp_path: Path) -> None:
    out = io.StringIO()
    report = tmp_path / "run.html"
    with pytest.raises(KeyboardInterrupt), Monitor(5, stream=out, resources=False) as m:
        m.save_html(report)
        m.log(0, 0.1, {"loss": 1.0})
        m.log(1, 0.1, {"loss": 0.5})
        raise KeyboardInterrupt
    assert "interrupted (Ctrl-C): writing the partial report" in out.getvalue()
    html = report.read_text()
    assert '"complete":{"epochs":2' in html


def test_stream_must_be_writable() -> None:
    with pytest.raises(ConfigError, match=r"stream must be a text stream .* got str 'out.txt'"):
        Monitor(3, stream="out.txt", resources=False)  # type: ignore[arg-type]


def test_metadata_must_be_json(tmp_path: Path) -> None:
    m = Monitor(2, stream=io.StringIO(), resources=False)
    with pytest.raises(ConfigError, match=r"metadata\['when'\] = .* is not JSON-serialisable"):
        m.set_metadata({"when": datetime.date(2024, 1, 1)})
    with pytest.raises(ConfigError, match="metadata must be a dict, got list"):
        m.set_metadata([("a", 1)])  # type: ignore[arg-type]
    m.save_html(tmp_path / "report.html")  # the refused metadata left nothing behind
    m.finish()


def test_a_report_that_cannot_be_written_is_not_retried_by_finish(tmp_path: Path) -> None:
    m = Monitor(2, stream=io.StringIO(), resources=False)
    m.record_log(tmp_path / "records")
    m.log(0, 0.1, {"loss": 1.0})
    (tmp_path / "taken").mkdir()  # a folder where the file should go
    with pytest.raises(OSError):
        m.save_html(tmp_path / "taken")
    m.finish()  # writes nothing for it and closes the record log
    assert m._record_log is not None and not m._record_log._open
