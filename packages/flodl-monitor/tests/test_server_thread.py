"""The dashboard on a real socket, served from its background thread."""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request

import pytest

from flodl_core import ConfigError
from flodl_monitor import Monitor


def _monitor(total: int = 10) -> Monitor:
    return Monitor(total, stream=io.StringIO(), resources=False)


def test_real_server_in_a_background_thread() -> None:
    m = _monitor(3)
    url = m.serve(0)
    try:
        assert m.url == url and url.startswith("http://127.0.0.1:")
        assert url in m._stream.getvalue()  # type: ignore[union-attr]
        with pytest.raises(ConfigError, match="already serving"):
            m.serve(0)
        m.log(0, 0.1, {"loss": 1.0})
        with urllib.request.urlopen(url + "/api/history", timeout=5) as r:
            assert json.load(r)[0]["metrics"] == {"loss": 1.0}
        with urllib.request.urlopen(url + "/events", timeout=5) as r:
            head = "".join(r.readline().decode() for _ in range(7))
            assert "event: hello" in head and '"epoch":1' in head
        for bad, match in (
            ("/history?path=root&n=-3", "n must be"),
            ("/node?path=%ZZ", "malformed"),
        ):
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(url + bad, timeout=5)
            assert info.value.code == 400 and match in json.load(info.value)["error"]
        with pytest.raises(ConfigError, match="cannot serve the dashboard"):
            _monitor().serve(int(url.rsplit(":", 1)[1]))  # port in use
        with pytest.raises(ConfigError, match="port must be"):
            _monitor().serve(70000)
    finally:
        m.stop()
    m.stop()  # idempotent
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/paths", timeout=2)
