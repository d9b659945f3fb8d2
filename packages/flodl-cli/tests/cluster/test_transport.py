"""How a command reaches a worker: the ssh line, and ``~`` meaning the worker's home."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from flodl_cli.cluster import ClusterBuilder, LocalTransport, SshTransport
from flodl_cli.cluster._transport import home_quote, remote_line


def _fake_python(home: Path) -> Path:
    py = home / "venv" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text('#!/bin/sh\necho "ran $0 in $(pwd) with $*"\n')
    py.chmod(0o755)
    return py


def test_tilde_python_is_expanded_by_the_workers_shell(tmp_path: Path) -> None:
    """The form tutorial 12 uses (``python: ~/venv/bin/python``): the ssh line leaves the ``~``
    to the remote shell; run here by ``sh -c`` with another HOME, it finds that home's python."""
    home = tmp_path / "remote-home"
    py = _fake_python(home)
    (home / "proj dir").mkdir()
    w = (
        ClusterBuilder()
        .controller("h")
        .worker("a", python="~/venv/bin/python", path="~/proj dir")
        .build()
        .workers[0]
    )
    line = remote_line(w, [w.python, "-m", "x", "~/not-this-one"], {"K": "v w"})
    assert line == "cd ~/'proj dir' && exec env 'K=v w' ~/venv/bin/python -m x '~/not-this-one'"
    ssh = SshTransport().argv(w, [w.python, "-V"], {})
    assert ssh[-1] == "cd ~/'proj dir' && exec ~/venv/bin/python -V"
    env = dict(os.environ, HOME=str(home))
    done = subprocess.run(["sh", "-c", line], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == f"ran {py} in {home / 'proj dir'} with -m x ~/not-this-one"


def test_home_quote() -> None:
    assert home_quote("~") == "~" and home_quote("~/") == "~/"
    assert home_quote("~/a b") == "~/'a b'" and home_quote("/a b") == "'/a b'"
    assert home_quote("~other/x") == "'~other/x'"  # only the user's own home
    assert home_quote("python3") == "python3"


def test_local_transport_expands_tilde_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    py = _fake_python(home)
    monkeypatch.setenv("HOME", str(home))
    cfg = (
        ClusterBuilder()
        .controller("127.0.0.1")
        .transport("local")
        .worker("a", python="~/venv/bin/python", path="~")
        .build()
    )
    s = LocalTransport().spawn(cfg.workers[0], [cfg.workers[0].python, "x"], {})
    assert s.argv == [str(py), "x"] and s.cwd == str(home)
    done = subprocess.run(s.argv, cwd=s.cwd, env=s.env, capture_output=True, text=True)
    assert done.stdout.strip() == f"ran {py} in {home} with x"
