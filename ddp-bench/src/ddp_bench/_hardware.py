"""What the runs ran on: host, CPU, cores, torch, GPUs (read without initialising CUDA)."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def hardware() -> dict[str, Any]:
    import torch

    from flodl_core import detect_gpus

    return {
        "host": socket.gethostname(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "gpus": [g.name for g in detect_gpus()],
    }
