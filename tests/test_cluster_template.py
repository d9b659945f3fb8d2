"""``fdl @cluster train`` on the project ``fdl init`` makes: ``train`` is resolved from fdl.yml,
and the two "machines" (two copies of the project, started through the local transport) train
as one distributed run, of which only rank 0 writes outputs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]
pytest.importorskip("flodl_ddp")


def _fdl(*args: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FDL_ROOT", "FDL_ENV", "RANK")}
    env.pop("FLODL_WORLD_SIZE", None)
    env.update(OMP_NUM_THREADS="1", FLODL_VERBOSITY="normal")
    code = "import sys; from flodl_cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_cluster_train_is_one_run_and_rank_zero_writes(tmp_path: Path) -> None:
    assert _fdl("init", "proj", cwd=tmp_path, timeout=60).returncode == 0
    a = tmp_path / "proj"
    b = tmp_path / "proj-on-b"  # the second machine's copy of the project
    shutil.copytree(a, b)
    (a / "fdl.cluster.yml").write_text(
        "cluster:\n"
        f"  controller: {{host: 127.0.0.1, port: {_free_port()}, join_timeout: 60}}\n"
        "  transport: local\n"
        "  workers:\n"
        f"    - {{host: a, socket_ifname: lo, python: {sys.executable}, path: {a}}}\n"
        f"    - {{host: b, socket_ifname: lo, python: {sys.executable}, path: {b}}}\n"
    )
    done = _fdl("@cluster", "train", "--", "--epochs", "2", cwd=a, timeout=240)
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "fdl @cluster: train: python train.py -- --epochs 2" not in done.stderr
    assert "fdl @cluster: train: python train.py --epochs 2 on a, b" in done.stderr
    # One run of two ranks: rank 0 (on a) reports it, and alone writes the outputs.
    assert "2 ranks under torchrun" in out, out[-4000:]
    assert [x.split("|", 1)[0].strip() for x in out.splitlines() if "accuracy:" in x] == ["a"]
    assert (a / "runs" / "latest" / "model.fdl").is_file()
    assert not (b / "runs").exists()
