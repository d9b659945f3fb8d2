"""flodl-ddp on CUDA devices (marked ``gpu``: skipped where no CUDA device is present).

With one GPU: a GPU rank and a CPU rank training together in cpu-cadence and cpu-async (and in
cpu-cadence under float16 autocast with loss scaling), two ranks sharing one GPU, and one GPU in
the calling process, all launched from a fresh interpreter that must not initialise CUDA itself
(``cuda_trainer_script.py``). With two GPUs or more: the
nccl modes and cpu-sync on two GPUs, and the bypass functions over NCCL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.multiprocess]

HERE = Path(__file__).parent
# Averaging replicas is not one replica's trajectory: the same relative bound on the held-out MSE
# as the CPU mode tests (test_trainer_multiprocess.MODE_TOLERANCE), against the CPU solo run.
MODE_TOLERANCE = 0.35
# One GPU alone trains the same seeded model on the same batches as one CPU: only float32
# rounding differs (no TF32 for float32 matmuls by default).
DEVICE_TOLERANCE = 0.02
PAIRS = ("gpu_cpu_cadence", "gpu_cpu_async", "one_gpu_two_ranks", "gpu_cpu_fp16")
TWO_GPU_MODES = ("nccl-sync", "nccl-cadence", "nccl-async", "cpu-sync")


def _two_gpus() -> bool:
    return torch.cuda.is_available() and torch.cuda.device_count() >= 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("cuda") / "runs.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), *sys.path]), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(HERE / "cuda_trainer_script.py"), str(out)],
        capture_output=True, text=True, timeout=900, check=False, env=env, cwd=HERE,
    )  # fmt: skip
    assert proc.returncode == 0 and out.exists(), proc.stdout[-3000:] + proc.stderr[-5000:]
    return json.loads(out.read_text())


def _ok(runs: dict[str, Any], name: str) -> dict[str, Any]:
    run = runs[name]
    assert "error" not in run, f"{name} failed:\n{run['error']}"
    return run


def test_launching_gpu_ranks_does_not_initialise_cuda_here(runs: dict[str, Any]) -> None:
    assert runs["parent_initialised_cuda"] is False


@pytest.mark.parametrize("name", PAIRS)
def test_pairs_with_a_gpu_converge_like_solo(runs: dict[str, Any], name: str) -> None:
    solo = _ok(runs, "solo_cpu")["eval"]
    run = _ok(runs, name)
    assert run["world"] == 2 and run["state_devices"] == ["cpu"]
    assert run["eval"] <= solo * (1 + MODE_TOLERANCE), (run["eval"], solo)
    assert run["losses"][-1] < run["losses"][0] / 5, run["losses"]
    assert all(b > 0 for b in run["rank_batches"]) and run["syncs"] > 0
    assert sum(run["batch_share"]) == pytest.approx(1.0, abs=1e-6)
    # a CUDA rank reports the memory its replica, gradients and optimizer state took; a CPU
    # rank 0 (torch keeps no count there)
    for dev, peak in zip(run["devices"], run["peak_memory"], strict=True):
        assert (peak > 0) if dev.startswith("cuda") else (peak == 0), (dev, peak)


def test_one_gpu_runs_in_process_like_one_cpu(runs: dict[str, Any]) -> None:
    solo, gpu = _ok(runs, "solo_cpu"), _ok(runs, "cuda_solo")
    assert gpu["world"] == 1 and gpu["devices"] == ["cuda:0"] and gpu["state_devices"] == ["cpu"]
    assert gpu["eval"] == pytest.approx(solo["eval"], rel=DEVICE_TOLERANCE)
    assert gpu["peak_memory"][0] > 0 and solo["peak_memory"] == [0]


@pytest.mark.skipif(not _two_gpus(), reason="needs two CUDA devices")
@pytest.mark.parametrize("mode", TWO_GPU_MODES)
def test_two_gpus_in_every_averaging_backend(runs: dict[str, Any], mode: str) -> None:
    solo = _ok(runs, "solo_cpu")["eval"]
    run = _ok(runs, mode)
    assert run["devices"] == ["cuda:0", "cuda:1"] and run["state_devices"] == ["cpu"]
    assert run["eval"] <= solo * (1 + MODE_TOLERANCE), (run["eval"], solo)


@pytest.mark.skipif(not _two_gpus(), reason="needs two CUDA devices")
def test_bypass_functions_over_nccl(tmp_path: Path) -> None:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # spawned children import the worker by name
    from ddp_bypass_worker import nccl_main
    from rank_harness import spawn_ranks

    results = spawn_ranks(nccl_main, 2, (), tmp_path, 120.0)
    for res in results:
        assert res["params"] == [1.0] and res["running_mean"] == [0.0, 0.0]  # rank 0's
        assert res["mean"] == [1.5] and res["mean_device"].startswith("cuda")
        assert res["weighted"] == [pytest.approx(5.0 / 3.0)]  # (1·1 + 2·2) / 3
