"""What ``fdl diagnose`` and ``fdl probe`` report: facts about the machine and the environment,
and checks, each with the fix on the same line.

torch is imported here (lazily, with ``PYTORCH_NVML_BASED_CUDA_CHECK=1`` so asking whether CUDA
works does not initialise it).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

from ._dists import CLI_VERSION, installed_versions, pins
from ._hardware import Machine, detect
from ._torch_builds import arch_covered, choose

DASHBOARD_PORT = 3000


@dataclass
class Check:
    name: str
    level: str  # "ok" | "warn" | "error"
    detail: str
    fix: str = ""


@dataclass
class Facts:
    machine: Machine
    python: dict[str, Any]
    torch: dict[str, Any]
    packages: dict[str, dict[str, Any]]
    port_free: bool
    checks: list[Check] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(c.level == "error" for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "system": {k: v for k, v in self.machine.to_dict().items() if k != "gpus"},
            "gpus": self.machine.to_dict()["gpus"],
            "python": self.python,
            "torch": self.torch,
            "packages": self.packages,
            "dashboard_port": {"port": DASHBOARD_PORT, "free": self.port_free},
            "checks": [asdict(c) for c in self.checks],
            "ok": not self.failed,
        }


def _torch_facts() -> dict[str, Any]:
    from ._cmd_setup import installed_torch

    version, variant = installed_torch()
    if version is None:
        return {"installed": False}
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # a broken install is a finding, not a crash
        return {"installed": True, "version": version, "variant": variant, "error": str(e)}
    archs: list[str] = []
    if torch.version.cuda or getattr(torch.version, "hip", None):
        flags = getattr(torch._C, "_cuda_getArchFlags", lambda: "")() or ""
        archs = flags.split() or list(torch.cuda.get_arch_list())
    return {
        "installed": True,
        "version": version,
        "variant": variant,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "archs": archs,
        "cuda_available": bool(torch.cuda.is_available()),
        "gloo": bool(dist.is_available() and dist.is_gloo_available()),
        "nccl": bool(dist.is_available() and dist.is_nccl_available()),
    }


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def collect() -> Facts:
    machine = detect()
    python = {
        "version": platform.python_version(),
        "executable": sys.executable,
        "venv": sys.prefix != sys.base_prefix,
    }
    torch = _torch_facts()
    packages = {d: {"version": v, "pins": pins(d)} for d, v in installed_versions().items()}
    facts = Facts(machine, python, torch, packages, _port_free(DASHBOARD_PORT))
    facts.checks = _checks(facts)
    return facts


def _checks(f: Facts) -> list[Check]:
    out: list[Check] = []
    py_ok = sys.version_info >= (3, 10)
    out.append(
        Check(
            "python",
            "ok" if py_ok else "error",
            f"{f.python['version']}",
            "" if py_ok else "use Python >= 3.10",
        )
    )
    t = f.torch
    if not t["installed"]:
        out.append(Check("torch", "error", "not installed", "fdl setup"))
    elif "error" in t:
        out.append(
            Check(
                "torch",
                "error",
                f"{t['version']} does not import: {t['error']}",
                "fdl setup --force",
            )
        )
    else:
        accel = f"CUDA {t['cuda']}" if t["cuda"] else f"ROCm {t['hip']}" if t["hip"] else "CPU only"
        out.append(Check("torch", "ok", f"{t['version']} ({accel})"))
    out += _gpu_checks(f)
    if f.machine.gpus and t.get("installed") and "error" not in t:
        backend = "nccl" if any(g.vendor == "nvidia" for g in f.machine.gpus) else "gloo"
        has = t.get(backend, False)
        out.append(
            Check(
                f"ddp {backend}",
                "ok" if has else "warn",
                "available" if has else "missing",
                "" if has else "fdl setup --force",
            )
        )
    elif t.get("installed") and "error" not in t:
        out.append(
            Check(
                "ddp gloo",
                "ok" if t["gloo"] else "warn",
                "available" if t["gloo"] else "missing (multi-process CPU training unavailable)",
            )
        )
    out += _package_checks(f)
    if f.port_free:
        out.append(Check("dashboard port", "ok", f"{DASHBOARD_PORT} free on 127.0.0.1"))
    else:
        out.append(
            Check(
                "dashboard port",
                "warn",
                f"{DASHBOARD_PORT} in use",
                f"serve on another port: monitor.serve({DASHBOARD_PORT + 1})",
            )
        )
    return out


def _gpu_checks(f: Facts) -> list[Check]:
    """One check per GPU: can the installed torch build run on it?"""
    out: list[Check] = []
    t = f.torch
    wanted = choose(f.machine.gpus).variant
    for g in f.machine.gpus:
        name = f"gpu {g.index}"
        detail = f"{g.name} {g.arch}" + (f", {g.memory_mib} MiB" if g.memory_mib else "")
        if not t.get("installed") or "error" in t:
            out.append(Check(name, "warn", detail + ", no torch to run it", "fdl setup"))
        elif not t["archs"]:
            out.append(
                Check(
                    name,
                    "error",
                    detail + f", unused: torch {t['version']} is a CPU build",
                    f"fdl setup (installs the {wanted.name} build)",
                )
            )
        elif arch_covered(t["archs"], g) or (g.vendor == "amd" and t["hip"]):
            out.append(Check(name, "ok", detail + ", covered by this torch build"))
        else:
            out.append(
                Check(
                    name,
                    "error",
                    detail + f", not covered by torch ({' '.join(t['archs'])})",
                    f"fdl setup --force --variant {wanted.name}",
                )
            )
    return out


def _package_checks(f: Facts) -> list[Check]:
    """One check per installed flodl package: same version as fdl, and its flodl pins met."""
    out: list[Check] = []
    for dist, info in f.packages.items():
        bad = [
            p
            for p in info["pins"]
            if p.startswith("flodl-") and "==" in p and not _pin_ok(p, f.packages)
        ]
        if info["version"] != CLI_VERSION:
            out.append(
                Check(
                    dist,
                    "error",
                    f"{info['version']}, fdl is {CLI_VERSION}",
                    f"pip install {dist}=={CLI_VERSION}",
                )
            )
        elif bad:
            out.append(
                Check(
                    dist,
                    "error",
                    f"{info['version']} needs {', '.join(bad)}",
                    f"pip install {' '.join(bad)}",
                )
            )
        else:
            out.append(
                Check(
                    dist,
                    "ok",
                    info["version"]
                    + (f" (pins {', '.join(info['pins'])})" if info["pins"] else ""),
                )
            )
    return out


def _pin_ok(pin: str, packages: dict[str, dict[str, Any]]) -> bool:
    dist, _, version = pin.partition("==")
    have = packages.get(dist)
    return have is None or have["version"] == version
