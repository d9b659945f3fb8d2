"""Run ``fdl`` as a subprocess in a chosen folder, with a clean environment and, optionally, a
fake ``nvidia-smi`` on PATH (the GPU inventory the command sees)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

Fdl = Callable[..., subprocess.CompletedProcess[str]]


def fake_smi(folder: Path, rows: list[str]) -> Path:
    """A ``nvidia-smi`` that prints ``rows`` (``index, name, MiB, free MiB, cc, driver``)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + "".join(f"echo '{r}'\n" for r in rows))
    script.chmod(0o755)
    return folder


@pytest.fixture
def fdl(tmp_path: Path) -> Fdl:
    def run(
        *args: str,
        cwd: Path | None = None,
        gpus: list[str] | None = None,
        timeout: float = 120,
        **env: str,
    ) -> subprocess.CompletedProcess[str]:
        base = {
            k: v
            for k, v in os.environ.items()
            if k not in ("FDL_ROOT", "FDL_ENV", "CUDA_VISIBLE_DEVICES", "FLODL_WORLD_SIZE")
        }
        # Without a fake, hide any real nvidia-smi so results do not depend on the machine.
        smi = fake_smi(tmp_path / "_bin", gpus or [])
        base["PATH"] = f"{smi}{os.pathsep}{base.get('PATH', '')}"
        base.update(env)
        return subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from flodl_cli import main; sys.exit(main())",
                *args,
            ],
            cwd=cwd or tmp_path,
            env=base,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    return run
