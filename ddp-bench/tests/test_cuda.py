"""The ``quick`` preset with a GPU rank beside a CPU rank (marked ``gpu``: skipped where no
CUDA device is present): the heterogeneous pair of a one-GPU machine, through the cpu backend."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ddp_bench import SECTIONS

MODES = ("solo-0", "solo-1", "cpu-cadence", "cpu-async")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.multiprocess
def test_quick_preset_with_a_gpu_rank(
    tmp_path: Path, digits_dir: Path, run_bench: Callable[..., Any]
) -> None:
    out = tmp_path / "runs"
    run_bench("quick", "--devices", "cuda:0,cpu", "--output", str(out), "--data-dir",
              str(digits_dir), cwd=tmp_path, timeout=600)  # fmt: skip
    for mode, devices in zip(MODES, (["cuda:0"], ["cpu"], *[["cuda:0", "cpu"]] * 2), strict=True):
        rec = json.loads((out / "mlp" / mode / "run.json").read_text())
        assert rec["status"] == "complete" and rec["devices"] == devices, (mode, rec["devices"])
        assert rec["epochs"][-1]["eval"] > 50, f"{mode}: the bars are easy: the model must learn"
        peaks = dict(zip(rec["devices"], rec["peak_memory"], strict=True))
        assert peaks.get("cuda:0", 1) > 0 and peaks.get("cpu", 0) == 0, (mode, peaks)
    log = (out / "mlp" / "solo-0" / "training.log").read_text()
    assert "# device: cuda:0 alone" in log, log[:500]
    report = (out / "report.md").read_text()
    assert re.findall(r"^## (.+)$", report, re.M) == list(SECTIONS)
    assert re.search(r"\| mlp \| cpu-async \| cuda:0: [\d.]+ MiB, cpu: — \|", report), report
