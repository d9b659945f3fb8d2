import subprocess
import sys

import pytest
import torch

import flodl_core as fc
from flodl_core._device import _kfd_gpus, _parse_smi


def test_parse_nvidia_smi_csv() -> None:
    text = (
        "0, NVIDIA H200, 143771, 140000, 7, 9.0\n"
        "1, NVIDIA GeForce GTX 1060 6GB, 6144, 100, 55, 6.1\n"
    )
    gpus = _parse_smi(text)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].name == "NVIDIA H200"
    assert gpus[0].total_memory == 143771 * 2**20
    assert gpus[1].utilization == 55.0
    assert gpus[1].compute_capability == (6, 1)


def test_parse_smi_skips_garbage_and_na_fields() -> None:
    gpus = _parse_smi("No devices were found\n0, Tesla, [N/A], [N/A], [N/A], [N/A]\n")
    assert len(gpus) == 1
    assert gpus[0].total_memory is None and gpus[0].compute_capability is None


def test_kfd_topology_skips_cpu_nodes(tmp_path) -> None:
    for i, simd in enumerate([0, 256]):
        node = tmp_path / str(i)
        node.mkdir()
        (node / "properties").write_text(f"cpu_cores_count 8\nsimd_count {simd}\n")
        (node / "name").write_text("gfx1100\n" if simd else "\n")
    gpus = _kfd_gpus(tmp_path)
    assert [(g.name, g.vendor) for g in gpus] == [("gfx1100", "amd")]


def test_detect_gpus_does_not_initialise_cuda() -> None:
    code = "import torch, flodl_core as fc; fc.detect_gpus(); print(torch.cuda.is_initialized())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_resolve_device() -> None:
    assert fc.resolve_device(None) == torch.device("cpu")
    assert fc.resolve_device("cuda:1") == torch.device("cuda", 1)
    assert fc.resolve_device(0) == torch.device("cuda", 0)
    with pytest.raises(fc.ConfigError, match="unknown device 'tpu9'"):
        fc.resolve_device("tpu9")


def test_manual_seed_reproduces_all_generators() -> None:
    import random

    import numpy as np

    fc.manual_seed(7)
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    fc.manual_seed(7)
    b = (random.random(), np.random.rand(), torch.rand(1).item())
    assert a == b
    with pytest.raises(fc.ConfigError):
        fc.manual_seed(-1)
