"""``fdl @cluster COMMAND`` and ``fdl probe @cluster`` (the controller itself is tested in
tests/cluster/; here: the hooks, the options, the messages, fdl.yml commands and exit codes)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flodl_cli import main

from .conftest import Fdl

needs_ddp = pytest.mark.skipif(
    importlib.util.find_spec("flodl_ddp") is None,
    reason="a worker needs flodl-ddp: this machine is the worker here",
)

SSH_CLUSTER = """\
cluster:
  controller: {host: 10.0.0.1, port: 29400}
  workers:
    - {host: alpha, ssh: me@alpha.lan, socket_ifname: eth1, path: /srv/proj, devices: 2}
    - {host: beta, socket_ifname: eth1}
"""

FAKE_PYTHON = """#!/bin/sh
IFS= read -r token
echo "running on $FAKE_NAME"
exit "$FAKE_CODE"
"""


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def _local(tmp_path: Path, workers: str) -> Path:
    f = tmp_path / "fdl.cluster.yml"
    f.write_text(
        "cluster:\n  controller: {host: 127.0.0.1}\n  transport: local\n  workers:\n" + workers
    )
    return f


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["@cluster", "--help"], capsys)
    assert code == 0 and out.startswith("usage: fdl @cluster [--file FILE] [--dry-run] COMMAND")
    code, out, _ = _run(["--help"], capsys)
    assert "@cluster CMD" in out


def test_no_cluster_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(["@cluster", "python", "train.py"], capsys)
    assert code == 1
    assert f"fdl: error: no fdl.cluster.yml in {tmp_path} or its parents" in err


def test_invalid_file_names_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fdl.cluster.yml").write_text(
        "cluster:\n  controller: {host: 10.0.0.1}\n  workers: [{host: a}, {host: b}]\n"
    )
    code, _, err = _run(["@cluster", "python", "train.py"], capsys)
    assert code == 1
    assert err.startswith(f"fdl: error: {tmp_path / 'fdl.cluster.yml'}: cluster.workers[0]")
    assert "cluster.workers[0].socket_ifname: missing" in err


def test_dry_run_prints_each_workers_ssh_command_without_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fdl.cluster.yml").write_text(SSH_CLUSTER)
    monkeypatch.setenv("FLODL_CLUSTER_TOKEN", "secret-from-the-shell")
    code, out, _ = _run(["@cluster", "--dry-run", "python", "train.py", "--lr", "0.1"], capsys)
    assert code == 0
    alpha, beta = out.splitlines()
    assert alpha.startswith("alpha: ssh -T -o BatchMode=yes")
    assert "-- me@alpha.lan 'cd /srv/proj && exec env PYTHONUNBUFFERED=1" in alpha
    assert "GLOO_SOCKET_IFNAME=eth1" in alpha and "--host-rendezvous" in alpha
    assert "--node-rank=0 --nproc-per-node=2 --rdzv-backend=static" in alpha
    assert "--rdzv-endpoint=10.0.0.1:29400" in alpha
    assert alpha.endswith("-- python train.py --lr 0.1'")
    assert beta.startswith("beta: ssh ") and "-- beta 'exec env" in beta
    assert "--host-rendezvous" not in beta
    assert "secret" not in out


def test_unknown_option_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(["@cluster", "--fast", "python"], capsys)
    assert code == 2 and "unknown @cluster option '--fast'" in err
    code, _, err = _run(["@cluster"], capsys)
    assert code == 2 and "a command is required" in err


@needs_ddp
def test_probe_green_and_red(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    py = sys.executable
    _local(tmp_path, f"    - {{host: here, socket_ifname: lo, python: {py}}}\n")
    code, out, _ = _run(["probe", "@cluster"], capsys)
    assert code == 0, out
    assert out.splitlines()[0].split()[:2] == ["host", "reachable"]
    assert "lo 127.0.0.1" in out
    code, out, _ = _run(["@cluster", "probe", "--json"], capsys)
    assert code == 0 and '"ok": true' in out
    _local(
        tmp_path,
        f"    - {{host: here, socket_ifname: lo, python: {py}}}\n"
        f"    - {{host: there, socket_ifname: nope0, python: {py}}}\n",
    )
    code, out, err = _run(["probe", "@cluster"], capsys)
    assert code == 1
    assert "FAIL there: interface: nope0 missing" in out
    assert "fdl probe @cluster: there failed the interface check" in err
    code, _, err = _run(["probe", "@nope"], capsys)
    assert code == 2 and "unknown target '@nope'" in err


def test_the_controller_needs_no_torch_and_no_flodl_ddp(fdl: Fdl, tmp_path: Path) -> None:
    """Only the workers run flodl-ddp: a dry run works where neither it nor torch imports."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    for name in ("torch", "flodl_ddp", "flodl_core"):
        (blocker / name).mkdir()
        (blocker / name / "__init__.py").write_text(f"raise ImportError('{name} is absent')\n")
    (tmp_path / "fdl.cluster.yml").write_text(SSH_CLUSTER)
    path = f"{blocker}:{os.environ.get('PYTHONPATH', '')}"
    done = fdl("@cluster", "--dry-run", "python", "t.py", cwd=tmp_path, PYTHONPATH=path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("alpha: ssh -T")
    code = "import sys, flodl_cli.cluster; print(sorted(m for m in sys.modules if 'torch' in m))"
    proc = subprocess.run(
        [sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=path), capture_output=True
    )
    assert proc.stdout.strip() == b"[]", proc.stderr


def test_first_failure_sets_fdls_exit_code(fdl: Fdl, tmp_path: Path) -> None:
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    rows = [
        f"    - {{host: {h}, python: {fake}, env: {{FAKE_NAME: {h}, FAKE_CODE: {c}}}}}\n"
        for h, c in (("a", 0), ("b", 5))
    ]
    _local(tmp_path, "".join(rows).replace("python:", "socket_ifname: lo, python:"))
    done = fdl("@cluster", "python", "train.py", cwd=tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr
    assert "a   | running on a" in done.stdout and "b   | running on b" in done.stdout
    assert "fdl | b failed with exit code 5" in done.stdout
