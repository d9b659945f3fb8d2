"""The ``quick`` preset end to end: solo-0, solo-1 and two ElChe modes on 2 CPU ranks (gloo),
rank 1 slowed 2x; every run folder holds its artifacts and the report has every section."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ddp_bench import SECTIONS
from ddp_bench.data._mnist import idx_images, idx_labels

MODES = ("solo-0", "solo-1", "cpu-cadence", "cpu-async")
ARTIFACTS = ("run.json", "training.log", "timeline.json", "timeline.csv", "timeline.html",
             "dashboard.html")  # fmt: skip


def digits_like(folder: Path, n_train: int = 2000, n_test: int = 500) -> None:
    """A seeded, learnable 28x28 10-class set in MNIST's IDX layout (one bright bar per class)."""
    rng = np.random.default_rng(0)
    for stem, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 60, (n, 28, 28))
        for i, k in enumerate(labels):
            images[i, 2 + 2 * k : 4 + 2 * k, 4:24] = 255
        (folder / f"{stem}-images-idx3-ubyte").write_bytes(idx_images(images))
        (folder / f"{stem}-labels-idx1-ubyte").write_bytes(idx_labels(labels))


@pytest.mark.slow
@pytest.mark.multiprocess
def test_quick_preset(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    digits_like(data)
    out = tmp_path / "runs"
    env = dict(os.environ, FLODL_OFFLINE="1", PYTHONUNBUFFERED="1")
    proc = subprocess.run(
        [sys.executable, "-m", "ddp_bench", "quick", "--output", str(out), "--data-dir", str(data)],
        capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for mode in MODES:
        folder = out / "mlp" / mode
        for name in ARTIFACTS:
            assert (folder / name).is_file(), f"{mode}: {name} missing"
        log = (folder / "training.log").read_text()
        assert re.search(r"^epoch 2: loss=\d+\.\d{6}, eval=\d+\.\d{4}", log, re.M), log
        assert re.search(r"^total: \d+\.\d+s$", log, re.M) and "# devices: cpu" in log
        rec = json.loads((folder / "run.json").read_text())
        assert rec["status"] == "complete" and len(rec["epochs"]) == 2
        assert rec["epochs"][-1]["eval"] > 50, "the bars are easy: the model must learn them"
    ddp = json.loads((out / "mlp" / "cpu-cadence" / "run.json").read_text())
    assert ddp["devices"] == ["cpu", "cpu"] and ddp["slowdown"] == {"1": 2.0}
    assert len(ddp["ranks"]) == 2 and ddp["epochs"][-1]["syncs"] > 0
    assert "rank1" in (out / "mlp" / "cpu-cadence" / "dashboard.html").read_text()
    report = (out / "report.md").read_text()
    assert re.findall(r"^## (.+)$", report, re.M) == list(SECTIONS)
    for mode in MODES:
        assert f"| {mode} |" in report
    # A second run rotates the first one's artifacts instead of overwriting them.
    again = subprocess.run(
        [sys.executable, "-m", "ddp_bench", "--model", "mlp", "--mode", "solo-0", "--epochs", "1",
         "--batches", "5", "--output", str(out), "--data-dir", str(data)],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(list((out / "mlp" / "solo-0").glob("training.*.log"))) == 1
