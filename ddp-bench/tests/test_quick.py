"""The ``quick`` preset end to end: solo-0, solo-1 and two ElChe modes on 2 CPU ranks (gloo),
rank 1 slowed 2x; every run folder holds its artifacts and the report has every section."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ddp_bench import SECTIONS

MODES = ("solo-0", "solo-1", "cpu-cadence", "cpu-async")
ARTIFACTS = ("run.json", "training.log", "timeline.json", "timeline.csv", "timeline.html",
             "trace.json", "dashboard.html")  # fmt: skip


@pytest.mark.slow
@pytest.mark.multiprocess
def test_quick_preset(tmp_path: Path, digits_dir: Path, run_bench: Callable[..., Any]) -> None:
    out = tmp_path / "runs"
    data = ("--output", str(out), "--data-dir", str(digits_dir))
    run_bench("quick", *data, cwd=tmp_path, timeout=240)
    for mode in MODES:
        folder = out / "mlp" / mode
        for name in ARTIFACTS:
            assert (folder / name).is_file(), f"{mode}: {name} missing"
        log = (folder / "training.log").read_text()
        assert re.search(r"^epoch 2: loss=\d+\.\d{6}, eval=\d+\.\d{4}", log, re.M), log
        assert re.search(r"^total: \d+\.\d+s$", log, re.M)
        if mode.startswith("solo-"):  # one device alone: no mode, no peer, no averaging
            assert "# device: cpu alone" in log and "syncs" not in log and "rank 0" not in log
            assert "no averaging" in log and "mode" not in log
        else:
            assert f"| mode {mode} |" in log and "# devices: cpu, cpu (rank 1 slowed 2x)" in log
        rec = json.loads((folder / "run.json").read_text())
        assert rec["status"] == "complete" and len(rec["epochs"]) == 2
        assert rec["epochs"][-1]["eval"] > 50, "the bars are easy: the model must learn them"
    ddp = json.loads((out / "mlp" / "cpu-cadence" / "run.json").read_text())
    assert ddp["devices"] == ["cpu", "cpu"] and ddp["slowdown"] == {"1": 2.0}
    assert len(ddp["ranks"]) == 2 and ddp["epochs"][-1]["syncs"] > 0
    # each rank's compute speed (samples over compute time) is above its wall-time throughput
    speed, thr = ddp["epochs"][-1]["rank_speed"], ddp["epochs"][-1]["throughput"]
    assert len(speed) == 2 and all(s >= t > 0 for s, t in zip(speed, thr, strict=True))
    assert "rank1" in (out / "mlp" / "cpu-cadence" / "dashboard.html").read_text()
    # the two CPU ranks are bound to their own cores where the platform can (a solo run is not)
    can_bind = hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2
    assert ddp["bound_cores"] is can_bind
    assert json.loads((out / "mlp" / "solo-0" / "run.json").read_text())["bound_cores"] is False
    bound_line = "each rank bound to its own cores"
    assert (bound_line in (out / "mlp" / "cpu-cadence" / "training.log").read_text()) is can_bind
    assert (
        "slowed 2x, as rank 1 of the multi-rank runs"
        in (out / "mlp" / "solo-1" / "training.log").read_text()
    )
    trace = json.loads((out / "mlp" / "cpu-cadence" / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert names == {"rank 0", "rank 1"}
    report = (out / "report.md").read_text()
    assert "**Too short to time**" in report  # 2 epochs of ~60 batches: well under 2 s
    assert re.findall(r"^## (.+)$", report, re.M) == list(SECTIONS)
    for mode in MODES:
        assert f"| {mode} |" in report
    # A second run rotates the first one's artifacts instead of overwriting them.
    run_bench("--model", "mlp", "--mode", "solo-0", "--epochs", "1", "--batches", "5", *data,
              cwd=tmp_path, timeout=120)  # fmt: skip
    assert len(list((out / "mlp" / "solo-0").glob("training.*.log"))) == 1
