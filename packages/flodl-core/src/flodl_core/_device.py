"""Devices and GPU detection.

:func:`detect_gpus` answers "which GPUs does this machine have?" *without initialising CUDA* in the
calling process. A launcher that touched ``torch.cuda`` before forking ranks would poison the
children's CUDA contexts, so detection reads ``nvidia-smi`` and sysfs (and the AMD KFD topology)
instead of asking the CUDA runtime.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ._checks import check_int
from ._errors import ConfigError

DeviceLike = str | torch.device | int | None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as seen from outside any GPU runtime.

    ``total_memory`` and ``free_memory`` are bytes (``None`` when the source does not say).
    """

    index: int
    name: str
    vendor: str
    total_memory: int | None = None
    free_memory: int | None = None
    utilization: float | None = None  # percent, 0-100
    compute_capability: tuple[int, int] | None = None


_SMI_FIELDS = "index,name,memory.total,memory.free,utilization.gpu,compute_cap"


def _parse_smi(text: str) -> list[GpuInfo]:
    gpus: list[GpuInfo] = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue

        def num(s: str) -> float | None:
            try:
                return float(s)
            except ValueError:
                return None

        total, free, util = num(parts[2]), num(parts[3]), num(parts[4])
        cc: tuple[int, int] | None = None
        if len(parts) > 5 and "." in parts[5]:
            major, minor = parts[5].split(".", 1)
            if major.isdigit() and minor.isdigit():
                cc = (int(major), int(minor))
        gpus.append(
            GpuInfo(
                index=int(parts[0]),
                name=parts[1],
                vendor="nvidia",
                total_memory=int(total * 2**20) if total is not None else None,
                free_memory=int(free * 2**20) if free is not None else None,
                utilization=util,
                compute_capability=cc,
            )
        )
    return gpus


def _nvidia_smi() -> list[GpuInfo]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return _parse_smi(out.stdout) if out.returncode == 0 else []


def _kfd_gpus(root: Path = Path("/sys/class/kfd/kfd/topology/nodes")) -> list[GpuInfo]:
    """AMD GPUs from the kernel's KFD topology (CPU nodes have ``simd_count 0``)."""
    gpus: list[GpuInfo] = []
    if not root.is_dir():
        return gpus
    for node in sorted(root.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30):
        props = node / "properties"
        try:
            fields = dict(
                line.split(None, 1) for line in props.read_text().splitlines() if " " in line
            )
        except OSError:
            continue
        if int(fields.get("simd_count", "0")) == 0:
            continue
        name = (node / "name").read_text().strip() if (node / "name").exists() else "amd-gpu"
        gpus.append(GpuInfo(index=len(gpus), name=name or "amd-gpu", vendor="amd"))
    return gpus


def detect_gpus() -> list[GpuInfo]:
    """List the machine's GPUs without loading a GPU runtime into this process.

    Honours ``CUDA_VISIBLE_DEVICES`` when it lists plain indices. Returns ``[]`` on a CPU-only
    machine.
    """
    gpus = _nvidia_smi() or _kfd_gpus()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and gpus:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        if all(v.isdigit() for v in wanted):
            by_index = {g.index: g for g in gpus}
            gpus = [by_index[int(v)] for v in wanted if int(v) in by_index]
    return gpus


def resolve_device(device: DeviceLike = None) -> torch.device:
    """``None`` -> CPU; ``"cuda"``/``"cuda:1"``/``1``/``torch.device`` -> that device.

    Raises :class:`ConfigError` naming the device when it does not parse.
    """
    if device is None:
        return torch.device("cpu")
    if isinstance(device, torch.device):
        return device
    if isinstance(device, int):
        return torch.device("cuda", device)
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"unknown device {device!r}: expected 'cpu', 'cuda' or 'cuda:N'") from e


def cuda_available() -> bool:
    """Whether CUDA can be used. This *does* initialise CUDA; launchers use :func:`detect_gpus`."""
    return torch.cuda.is_available()


def default_device() -> torch.device:
    """``cuda`` when a GPU is usable, else ``cpu`` (initialises CUDA if present)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def manual_seed(seed: int) -> None:
    """Seed Python's ``random``, NumPy and torch (every device) in one call."""
    seed = check_int(seed, "seed", ge=0, where="manual_seed")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
