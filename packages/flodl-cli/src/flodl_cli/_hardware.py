"""What the machine has: CPU, RAM and GPUs, read without any GPU runtime.

``flodl_core.detect_gpus`` does the same for the library, but importing ``flodl_core`` imports
torch, and ``fdl setup`` must run *before* torch is installed (it picks which torch build to
install). So this module reads ``nvidia-smi`` and the AMD KFD topology itself; it never
initialises CUDA.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_SMI_FIELDS = "index,name,memory.total,memory.free,compute_cap,driver_version"
KFD_ROOT = Path("/sys/class/kfd/kfd/topology/nodes")


@dataclass(frozen=True)
class Gpu:
    """One GPU. ``memory_mib``/``free_mib`` in MiB; ``arch`` is ``"sm_86"`` or ``"gfx90a"``."""

    index: int
    name: str
    vendor: str  # "nvidia" | "amd"
    memory_mib: int | None = None
    free_mib: int | None = None
    compute_capability: tuple[int, int] | None = None
    driver: str | None = None
    gfx: str | None = None

    @property
    def arch(self) -> str:
        if self.compute_capability is not None:
            return "sm_{}{}".format(*self.compute_capability)
        return self.gfx or "unknown"


@dataclass(frozen=True)
class Machine:
    """The inventory ``fdl setup`` / ``diagnose`` / ``probe`` work from."""

    os: str
    cpu: str
    cores: int
    ram_mib: int | None
    gpus: list[Gpu] = field(default_factory=list)
    gpu_source: str = "none"  # "nvidia-smi" | "kfd" | "none"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for g, gd in zip(self.gpus, d["gpus"], strict=True):
            gd["arch"] = g.arch
        return d


def parse_nvidia_smi(text: str) -> list[Gpu]:
    """GPUs from ``nvidia-smi --query-gpu=<_SMI_FIELDS> --format=csv,noheader,nounits``."""
    gpus: list[Gpu] = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        cc = None
        if len(parts) > 4 and "." in parts[4]:
            major, minor = parts[4].split(".", 1)
            if major.isdigit() and minor.isdigit():
                cc = (int(major), int(minor))
        gpus.append(
            Gpu(
                index=int(parts[0]),
                name=parts[1],
                vendor="nvidia",
                memory_mib=_int(parts[2]),
                free_mib=_int(parts[3]),
                compute_capability=cc,
                driver=parts[5] if len(parts) > 5 and parts[5] else None,
            )
        )
    return gpus


def _int(s: str) -> int | None:
    try:
        return int(float(s))
    except ValueError:
        return None


def nvidia_gpus() -> list[Gpu]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={_SMI_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else []


def amd_gpus(root: Path = KFD_ROOT) -> list[Gpu]:
    """AMD GPUs from the kernel's KFD topology (CPU nodes have ``simd_count 0``)."""
    gpus: list[Gpu] = []
    if not root.is_dir():
        return gpus
    nodes = sorted(root.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 1 << 30)
    for node in nodes:
        try:
            props = dict(
                line.split(None, 1)
                for line in (node / "properties").read_text().splitlines()
                if " " in line
            )
        except OSError:
            continue
        if int(props.get("simd_count", "0")) == 0:
            continue
        # gfx_target_version is e.g. 90010 -> gfx90a (major 9, minor 0, stepping 10 = 0xa).
        gfx = None
        target = int(props.get("gfx_target_version", "0") or 0)
        if target:
            gfx = f"gfx{target // 10000}{(target // 100) % 100:x}{target % 100:x}"
        name_file = node / "name"
        name = name_file.read_text().strip() if name_file.exists() else ""
        gpus.append(Gpu(index=len(gpus), name=name or "AMD GPU", vendor="amd", gfx=gfx))
    return gpus


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ram_mib() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        return None


def visible(gpus: list[Gpu]) -> list[Gpu]:
    """``gpus`` filtered by ``CUDA_VISIBLE_DEVICES`` when it lists plain indices."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None or not gpus:
        return gpus
    wanted = [v.strip() for v in env.split(",") if v.strip()]
    if not all(v.isdigit() for v in wanted):
        return gpus
    by_index = {g.index: g for g in gpus}
    return [by_index[int(v)] for v in wanted if int(v) in by_index]


def detect(kfd_root: Path = KFD_ROOT) -> Machine:
    """The whole inventory. GPUs honour ``CUDA_VISIBLE_DEVICES``."""
    gpus, source = nvidia_gpus(), "nvidia-smi"
    if not gpus:
        gpus, source = amd_gpus(kfd_root), "kfd"
    if not gpus:
        source = "none"
    return Machine(
        os=f"{platform.system()} {platform.release()} ({platform.machine()})",
        cpu=_cpu_name(),
        cores=os.cpu_count() or 1,
        ram_mib=_ram_mib(),
        gpus=visible(gpus),
        gpu_source=source,
    )
