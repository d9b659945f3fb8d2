"""fdl diagnose / fdl probe: facts, per-GPU coverage, exit 1 with the fix on the same line."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from .conftest import Fdl

SM86 = "0, NVIDIA GeForce RTX 3090, 24576, 24000, 8.6, 550.54"


def _cpu_torch() -> bool:
    from flodl_cli._cmd_setup import installed_torch

    return installed_torch()[1] == "cpu"


def test_diagnose_json_on_this_machine(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("diagnose", "--json")
    data = json.loads(proc.stdout)
    assert set(data) >= {
        "system",
        "gpus",
        "python",
        "torch",
        "packages",
        "dashboard_port",
        "checks",
    }
    assert data["gpus"] == [] and data["system"]["cores"] >= 1
    assert "flodl-cli" in data["packages"]
    assert proc.returncode == (0 if data["ok"] else 1)


def test_diagnose_text(fdl: Fdl) -> None:
    out = fdl("diagnose").stdout
    for section in ("system", "python", "torch", "gpus (", "flodl packages", "dashboard"):
        assert section in out


@pytest.mark.skipif(not _cpu_torch(), reason="needs the CPU torch build")
def test_gpu_with_cpu_torch_is_an_error_with_the_fix(fdl: Fdl) -> None:
    proc = fdl("probe", gpus=[SM86])
    assert proc.returncode == 1
    line = next(ln for ln in proc.stdout.splitlines() if "gpu 0" in ln)
    assert line.startswith("FAIL") and "sm_86" in line and "fix: fdl setup" in line
    data = json.loads(fdl("diagnose", "--json", gpus=[SM86]).stdout)
    assert data["gpus"][0]["compute_capability"] == [8, 6]
    assert data["gpus"][0]["memory_mib"] == 24576
    assert not data["ok"]
    text = fdl("diagnose", gpus=[SM86]).stdout
    assert "error: gpu 0:" in text and "; fix: fdl setup" in text


def test_busy_dashboard_port_is_a_warning(fdl: Fdl) -> None:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", 3000))
        except OSError:
            pytest.skip("port 3000 is taken by something else")
        s.listen()
        proc = fdl("probe", "--json")
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["dashboard port"]["level"] == "warn"
    assert "monitor.serve(3001)" in checks["dashboard port"]["fix"]


def test_probe_ok_lines(fdl: Fdl) -> None:
    proc = fdl("probe")
    assert proc.stdout.splitlines()[0].startswith("ok    python")
    assert proc.returncode in (0, 1)
