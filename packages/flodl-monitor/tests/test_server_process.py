"""The dashboard on a real socket, served from its own process (``Monitor.serve``)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import torch

from flodl_core import ConfigError
from flodl_monitor import Alert, DashboardServer, Monitor, RecordTree

from .test_listen import OVERSIZED, raw_request


def _monitor(total: int = 10, **kw: Any) -> Monitor:
    return Monitor(total, stream=io.StringIO(), resources=False, **kw)


def _read(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        return bytes(r.read())


def _get(url: str) -> Any:
    return json.loads(_read(url))


def _error(url: str) -> tuple[int, Any]:
    """The status and JSON body of a request that must fail."""
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, timeout=10)
    with info.value as err:  # closes the connection it holds
        return err.code, json.loads(err.read())


def _frames(resp: Any, until: str) -> list[tuple[str, Any]]:
    """SSE frames read from an open ``urlopen`` response up to the first ``until`` event."""
    out: list[tuple[str, Any]] = []
    event = None
    while True:
        line = resp.readline().decode()
        assert line, f"stream ended before {until!r}; got {[e for e, _ in out]}"
        if line.startswith("event: "):
            event = line[7:].strip()
        elif line.startswith("data: ") and event is not None:
            out.append((event, json.loads(line[6:])))
            if event == until:
                return out
            event = None


def _gone(pid: int, within: float) -> bool:
    """True once ``pid`` no longer runs (a zombie counts as gone)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_real_server_in_its_own_process() -> None:
    m = _monitor(3)
    url = m.serve(0, allowed_hosts=["dash.lab"])
    server = m._server
    assert server is not None and server.pid is not None and server.pid != os.getpid()
    try:
        assert m.url == url and url.startswith("http://127.0.0.1:")
        assert url in m._stream.getvalue()  # type: ignore[union-attr]
        maps = Path(f"/proc/{server.pid}/maps")
        if maps.exists():  # starts in about a second: the server process needs no torch
            assert "libtorch" not in maps.read_text(), (
                "the server process imported torch: a flodl_core name used by the server "
                "modules lives outside _server._LIGHT_CORE"
            )
        with pytest.raises(ConfigError, match="already serving"):
            m.serve(0)
        m.log(0, 0.1, {"loss": 1.0})
        time.sleep(0.2)  # the epoch travels to the server process
        assert _get(url + "/api/history")[0]["metrics"] == {"loss": 1.0}
        with urllib.request.urlopen(url + "/events", timeout=10) as r:
            head = "".join(r.readline().decode() for _ in range(7))
            assert "event: hello" in head and '"epoch":1' in head
        for bad, match in (
            ("/history?path=root&n=-3", "n must be"),
            ("/node?path=%ZZ", "malformed"),
        ):
            code, body = _error(url + bad)
            assert code == 400 and match in body["error"]
        port = int(url.rsplit(":", 1)[1])
        for data, status, limit in OVERSIZED[:2]:  # refused by the parser: JSON all the same
            code, _, body = raw_request(port, data)
            assert code == status and str(limit) in body["error"]
        hosts = (
            (f"evil.example:{port}", 403),
            (f"localhost:{port}", 200),
            (f"dash.lab:{port}", 200),
        )
        for host, status in hosts:
            request = f"GET /paths HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            assert raw_request(port, request.encode())[0] == status, host
        if hasattr(signal, "SIGINT"):  # Ctrl-C belongs to the training process
            os.kill(server.pid, signal.SIGINT)
            time.sleep(0.2)
            assert _get(url + "/paths") == {"paths": ["root"]}
        with pytest.raises(ConfigError, match="cannot serve the dashboard"):
            _monitor().serve(port)  # port in use
        with pytest.raises(ConfigError, match="port must be"):
            _monitor().serve(70000)
        with pytest.raises(ConfigError, match="max_clients"):
            _monitor().serve(0, max_clients=0)
        with pytest.raises(ConfigError, match="allowed_hosts must be a list"):
            _monitor().serve(0, allowed_hosts="dash.lab")
        with pytest.raises(ConfigError, match=r"host must be a str .* got NoneType None"):
            _monitor().serve(0, host=None)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="host must be an address of this machine"):
            _monitor().serve(0, host="127.0.0.1:3000")  # a port inside the host
        with pytest.raises(ConfigError, match="queue_size must be an int >= 1"):
            DashboardServer(_monitor(), queue_size=0)
        with pytest.raises(ConfigError, match="coalesce must be a finite"):
            DashboardServer(_monitor(), coalesce=float("nan"))
    finally:
        m.stop()
    m.stop()  # idempotent
    assert _gone(server.pid, 5)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/paths", timeout=2)


class _Observed(torch.nn.Linear):
    def latest_metrics(self) -> dict[str, float]:
        return {"loss": 1.0}


def test_replay_live_epochs_identity_page_svg_and_complete() -> None:
    m = _monitor(5)
    m.log(0, 0.1, {"loss": 2.0})
    m.log(1, 0.1, {"loss": float("nan")})  # an alert before the server starts
    with m:
        url = m.serve(0)
        page = _read(url + "/").decode()
        assert '"hash":null' in page  # asked from the training process: nothing known yet
        assert _error(url + "/graph.svg")[0] == 404
        m.set_svg("<svg></svg>")
        assert _read(url + "/graph.svg") == b"<svg></svg>"
        with urllib.request.urlopen(url + "/events", timeout=10) as early:
            frames = _frames(early, "alert")
            assert frames[0] == ("hello", {"epochs": 2})
            assert [d["epoch"] for e, d in frames if e == "epoch"] == [1, 2]
            assert frames[-1][1]["kind"] == "nan_loss"
            m.log(2, 0.1, _Observed(2, 3))  # the model (and its identity) seen only now
            live = _frames(early, "epoch")
            ident = dict(live)["identity"]
            assert ident["parameters"]["total"] == 9 and live[-1][1]["epoch"] == 3
            m.log(3, 0.1, {"loss": 0.5})
            m.log(4, 0.1, {"loss": 0.25})
            m.finish()
            tail = _frames(early, "complete")
            assert [e for e, _ in tail] == ["epoch", "epoch", "complete"]
            assert early.read().strip() == b""  # the stream ends after complete
        with urllib.request.urlopen(url + "/events", timeout=10) as late:
            frames = _frames(late, "complete")  # a late joiner gets everything
            assert [d["epoch"] for e, d in frames if e == "epoch"] == [1, 2, 3, 4, 5]
            assert dict(frames)["identity"] == ident
        page = _read(url).decode()
        assert '"parameters":{"total":9' in page  # rendered now with what is known
    assert m.url is None  # the context manager stopped it


def test_record_tree_routes_and_streams_from_the_server_copy() -> None:
    tree = RecordTree(rollup={"acc": "sum"})
    for r in range(3):
        tree.publish(f"root/h/rank{r}", {"loss": 1.0 + r, "acc": 0.5}, step=0)
    m = _monitor(record_path=None, records=tree)
    url = m.serve(0)
    try:
        with urllib.request.urlopen(url + "/stream?path=root/h", timeout=10) as stream:
            head = _frames(stream, "history")
            assert head[0][1]["leaves"] == 3 and head[0][1]["latest"]["metrics"]["acc"] == 1.5
            for r in range(3):
                tree.publish(f"root/h/rank{r}", {"loss": 0.5, "acc": 1.0}, step=1)
            # The three records may reach the server in two coalescing windows: read until
            # the rollup has all three.
            rec: dict[str, Any] = {}
            while rec.get("n") != 3:
                frames = _frames(stream, "record")
                rec = frames[-1][1]
            assert rec["step"] == 1 and rec["metrics"]["acc"] == 3.0
            tree.alert(Alert("rank_lost", "root/h/rank1", "root/h/rank1 stopped reporting"))
            assert _frames(stream, "alert")[-1][1]["path"] == "root/h/rank1"
        assert _get(url + "/paths")["paths"] == tree.paths()
        for path in ("root", "root/h", "root/h/rank2"):
            assert _get(f"{url}/node?path={path}") == json.loads(json.dumps(tree.node(path)))
            got = _get(f"{url}/history?path={path}")["records"]
            assert got == json.loads(json.dumps(tree.history(path)))
    finally:
        m.stop()


def test_ranks_that_stop_reporting_are_flagged_while_training_is_idle() -> None:
    tree = RecordTree(stale_after=0.3)
    tree.publish("root/a", {"loss": 1.0})
    tree.publish("root/b", {"loss": 1.0})
    m = _monitor(record_path=None, records=tree)
    url = m.serve(0)
    try:
        deadline = time.monotonic() + 10
        node = _get(url + "/node?path=root")
        while not all(c["lost"] for c in node["children"]) and time.monotonic() < deadline:
            time.sleep(0.1)
            node = _get(url + "/node?path=root")
        assert [c["lost"] for c in node["children"]] == [True, True]
        assert sorted(a["path"] for a in node["alerts"] if a["kind"] == "rank_lost") == [
            "root/a",
            "root/b",
        ]
    finally:
        m.stop()


_ORPHAN = """
import io, sys, time
from flodl_monitor import Monitor
m = Monitor(3, stream=io.StringIO(), resources=False)
url = m.serve(0)
print(m._server.pid, url, flush=True)
time.sleep(60)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_server_exits_when_the_training_process_dies() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        pid_s, url = proc.stdout.readline().split()
        assert _get(url + "/paths") == {"paths": ["root"]}
        proc.kill()  # no stop(), no atexit: the server must notice on its own
        proc.wait(10)
        assert _gone(int(pid_s), 10), "the server process outlived the training process"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
