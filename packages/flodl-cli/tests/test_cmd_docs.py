"""``fdl docs``: the build command it runs, its errors, and the static server (127.0.0.1 only)."""

from __future__ import annotations

import argparse
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from flodl_cli import _cmd_docs as docs
from flodl_cli._errors import CliError


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fdl")
    docs.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["docs", *argv])


def _workspace(tmp_path: Path) -> Path:
    (tmp_path / "noxfile.py").write_text("")
    (tmp_path / "mkdocs.yml").write_text("site_name: test\n")
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<h1>flodl</h1>")
    return tmp_path


def test_parser_defaults() -> None:
    args = _parse()
    assert (args.serve, args.port) == (False, docs.DEFAULT_PORT)
    args = _parse("--serve", "--port", "0")
    assert (args.serve, args.port) == (True, 0)


def test_build_runs_mkdocs_strict_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _workspace(tmp_path)
    monkeypatch.setenv("FDL_ROOT", str(root))
    monkeypatch.setattr(docs, "_missing_tools", list)
    calls: list[dict[str, Any]] = []

    def fake_call(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> int:
        calls.append({"cmd": cmd, "cwd": cwd, "env": env})
        return 0

    monkeypatch.setattr(docs, "call", fake_call)
    assert docs.run(_parse()) == 0
    (only,) = calls
    assert only["cmd"][1:] == ["-m", "mkdocs", "build", "--strict", "--config-file", "mkdocs.yml"]
    assert only["cwd"] == root and only["env"]["NO_MKDOCS_2_WARNING"] == "1"
    assert str(root / "site" / "index.html") in capsys.readouterr().out


def test_failed_build_is_returned_and_nothing_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FDL_ROOT", str(_workspace(tmp_path)))
    monkeypatch.setattr(docs, "_missing_tools", list)
    monkeypatch.setattr(docs, "call", lambda *a, **k: 1)
    monkeypatch.setattr(docs, "make_server", lambda *a: pytest.fail("served a failed build"))
    assert docs.run(_parse("--serve")) == 1


def test_missing_tools_say_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FDL_ROOT", str(_workspace(tmp_path)))
    monkeypatch.setattr(docs.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CliError) as e:
        docs.run(_parse())
    assert "mkdocs-material" in e.value.message and "mkdocstrings-python" in e.value.message
    assert e.value.fix is not None and "constraints.txt" in e.value.fix


def test_no_workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "noxfile.py").write_text("")  # a workspace without mkdocs.yml
    monkeypatch.setenv("FDL_ROOT", str(tmp_path))
    with pytest.raises(CliError, match=r"mkdocs\.yml"):
        docs.run(_parse())


@pytest.mark.parametrize("port", [-1, 65536])
def test_bad_port(port: int) -> None:
    with pytest.raises(CliError, match=f"--port {port}") as e:
        docs.run(_parse("--port", str(port)))
    assert e.value.code == 2


def test_server_serves_the_site_on_loopback_only(tmp_path: Path) -> None:
    site = _workspace(tmp_path) / "site"
    server = docs.make_server(site, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=10) as r:
            assert r.read() == b"<h1>flodl</h1>"
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/missing.html", timeout=10)
        assert e.value.code == 404
        e.value.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_port_in_use(tmp_path: Path) -> None:
    site = _workspace(tmp_path) / "site"
    first = docs.make_server(site, 0)
    try:
        with pytest.raises(CliError, match="cannot serve"):
            docs.make_server(site, first.server_address[1])
    finally:
        first.server_close()
