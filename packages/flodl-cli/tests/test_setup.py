"""fdl setup: the torch build chosen for fake GPU inventories, the exact pip command."""

from __future__ import annotations

import sys
from pathlib import Path

from flodl_cli._hardware import Gpu, amd_gpus, parse_nvidia_smi
from flodl_cli._torch_builds import arch_covered, choose
from flodl_cli._torch_install import TORCH_VERSION

from .conftest import Fdl

SM61 = "0, NVIDIA GeForce GTX 1080, 8192, 8000, 6.1, 550.54"
SM86 = "0, NVIDIA GeForce RTX 3090, 24576, 24000, 8.6, 550.54"
SM120 = "1, NVIDIA GeForce RTX 5090, 32768, 32000, 12.0, 570.1"


def _gpu(cc: tuple[int, int]) -> Gpu:
    return Gpu(0, "g", "nvidia", compute_capability=cc)


def test_choice_table() -> None:
    assert choose([]).variant.name == "cpu"
    assert choose([_gpu((8, 6)), _gpu((12, 0))]).variant.name == "cu128"
    assert choose([_gpu((6, 1)), _gpu((7, 5))]).variant.name == "cu126"
    assert choose([_gpu((5, 0))]).variant.name == "cu126"
    mixed = choose([_gpu((6, 1)), _gpu((12, 0))])
    assert mixed.uncovered and mixed.uncovered[0].compute_capability == (6, 1)
    assert choose([Gpu(0, "mi", "amd", gfx="gfx90a")]).variant.name == "rocm6.4"


def test_arch_coverage_rules() -> None:
    archs = ["sm_80", "sm_90", "compute_90"]
    assert arch_covered(archs, _gpu((8, 6)))  # same major, higher minor
    assert arch_covered(archs, _gpu((12, 0)))  # PTX JIT from compute_90
    assert not arch_covered(["sm_80"], _gpu((7, 5)))
    assert not arch_covered(["sm_90"], _gpu((8, 9)))


def test_parsers(tmp_path: Path) -> None:
    gpus = parse_nvidia_smi(f"{SM86}\n{SM120}\ngarbage\n")
    assert [(g.index, g.arch, g.memory_mib, g.driver) for g in gpus] == [
        (0, "sm_86", 24576, "550.54"),
        (1, "sm_120", 32768, "570.1"),
    ]
    for i, (simd, target) in enumerate(((0, 0), (104, 90010), (96, 110000))):
        node = tmp_path / str(i)
        node.mkdir()
        (node / "properties").write_text(f"simd_count {simd}\ngfx_target_version {target}\n")
    assert [g.gfx for g in amd_gpus(tmp_path)] == ["gfx90a", "gfx1100"]


def test_dry_run_cpu_machine(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("setup", "--dry-run", "--force", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "gpus     none found" in proc.stdout
    assert "plan     torch cpu: no GPU found" in proc.stdout
    assert f"would write {tmp_path.resolve() / 'fdl.yml'}" in proc.stdout
    assert not (tmp_path / "fdl.yml").exists()


def test_dry_run_prints_the_exact_pip_command(fdl: Fdl, tmp_path: Path) -> None:
    from flodl_cli._cmd_setup import installed_torch

    version, _ = installed_torch()
    proc = fdl("setup", "--dry-run", cwd=tmp_path, gpus=[SM86, SM120])
    assert proc.returncode == 0, proc.stderr
    assert "gpu 1    NVIDIA GeForce RTX 5090 (sm_120, 32 GiB)" in proc.stdout
    base = TORCH_VERSION if version is None else version.split("+")[0]
    pip = f"{sys.executable} -m pip install torch=={base}+cu128"
    assert f"would run: {pip}   (if your package index has this build)" in proc.stdout
    assert f"     else: {pip} --index-url https://download.pytorch.org/whl/cu128" in proc.stdout


def test_the_torch_version_comes_from_the_project_pin(fdl: Fdl, tmp_path: Path) -> None:
    # Never a bare `torch` (pip would take the newest, a CUDA build on Linux): the project's
    # constraints.txt decides the version, whatever torch is installed.
    (tmp_path / "constraints.txt").write_text("numpy==2.0\nTorch == 2.9.1  # tested\n")
    proc = fdl("setup", "--dry-run", cwd=tmp_path, gpus=[SM86])
    assert proc.returncode == 0, proc.stderr
    assert f"version  torch 2.9.1 (pinned in {tmp_path.resolve() / 'constraints.txt'})" in (
        proc.stdout
    )
    assert f"would run: {sys.executable} -m pip install torch==2.9.1+cu128 " in proc.stdout
    cpu = fdl("setup", "--dry-run", cwd=tmp_path)
    assert "torch==2.9.1+cpu" in cpu.stdout and "nothing to install" not in cpu.stdout


def test_mixed_gpus_need_a_decision(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("setup", "--dry-run", cwd=tmp_path, gpus=[SM61, SM120])
    assert proc.returncode == 1
    assert "no prebuilt torch covers every GPU: cu128 leaves out GPU 0 (sm_61)" in proc.stderr
    assert "fix: fdl setup --variant cu128" in proc.stderr
    ok = fdl("setup", "--dry-run", "--variant", "cu128", cwd=tmp_path, gpus=[SM61, SM120])
    assert ok.returncode == 0 and "cu128" in ok.stdout


def test_writes_a_starter_manifest(fdl: Fdl, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "tests").mkdir()
    # The right build is already there on a CPU machine with CPU torch, so nothing installs.
    from flodl_cli._cmd_setup import installed_torch

    if installed_torch()[1] != "cpu":
        return
    proc = fdl("setup", "-y", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "already the cpu build: nothing to install" in proc.stdout
    listed = fdl("--help", cwd=tmp_path).stdout
    assert "  train " in listed and "  test " in listed
