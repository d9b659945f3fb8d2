"""The dashboard page in a real headless Chromium: live during a run, and the offline files.

The page writes its state into the DOM (``data-epochs`` on body, ``data-points`` on every drawn
curve), so ``--dump-dom`` is enough to check it; no Selenium or Playwright needed.
"""

from __future__ import annotations

import io
import math
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from flodl_monitor import Monitor

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def _dump(url: str, profile: Path) -> str:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (CI installs it with .ci/browser.sh)")
    proc = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--virtual-time-budget=8000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _body(dom: str) -> dict[str, str]:
    tag = re.search(r"<body([^>]*)>", dom)
    assert tag is not None, dom[:500]
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', tag.group(1)))


def _curves(dom: str, chart: str) -> dict[str, int]:
    card = re.search(rf'data-chart="{re.escape(chart)}"(.*?)</svg>', dom, re.DOTALL)
    charts = re.findall(r'data-chart="([^"]+)"', dom)
    assert card is not None, f"no chart {chart!r}; charts: {charts}"
    return {
        n: int(k)
        for n, k in re.findall(r'data-series="([^"]+)" data-points="(\d+)"', card.group(1))
    }


def _loss(e: int) -> dict[str, float]:
    return {"loss": 2 * math.exp(-e / 4), "val.loss": 2.2 * math.exp(-e / 4), "acc": e / 12}


def test_live_page_during_a_run_and_the_offline_report(tmp_path: Path) -> None:
    total = 12
    m = Monitor(total, stream=io.StringIO())
    url = m.serve(0)
    try:
        for e in range(4):  # the page joins late, after 4 epochs
            m.log(e, 0.01, _loss(e))

        def rest() -> None:
            for e in range(4, total):
                time.sleep(0.08)
                m.log(e, 0.01, _loss(e))
            m.finish()

        trainer = threading.Thread(target=rest)
        trainer.start()
        dom = _dump(url, tmp_path / "profile-live")
        trainer.join()
    finally:
        m.stop()
    body = _body(dom)
    assert body["state"] == "complete" and body["epochs"] == str(total)
    assert _curves(dom, "metric-Loss") == {"loss": total, "val.loss": total}
    assert _curves(dom, "metric-acc") == {"acc": total}
    assert _curves(dom, "epoch-time") == {"seconds": total}

    report = m.save_html(tmp_path / "report.html")
    dom = _dump(report.as_uri(), tmp_path / "profile-report")
    body = _body(dom)
    assert body["state"] == "complete" and body["epochs"] == str(total)
    assert _curves(dom, "metric-Loss") == {"loss": total, "val.loss": total}
    assert f"Complete ({total})" in dom


def test_offline_record_portal_with_synthetic_ranks(tmp_path: Path) -> None:
    m = Monitor(6, stream=io.StringIO(), resources=False, record_path=None)
    for e in range(6):
        m.log(e, 0.01, _loss(e))
        for h in ("host-a", "host-b"):
            for r in range(3):
                m.records.publish(
                    f"root/{h}/rank{r}", {"loss": _loss(e)["loss"], "throughput": 100.0}, step=e
                )
    m.finish()
    page = m.save_dashboard(tmp_path / "dash.html")
    dom = _dump(page.as_uri() + "#path=root/host-b", tmp_path / "profile-dash")
    body = _body(dom)
    assert body["node-records"] == "6" and body["epochs"] == "6"
    assert _curves(dom, "node-Loss") == {"loss (mean)": 6}
    assert _curves(dom, "node-throughput") == {"throughput (sum)": 6}
    links = re.findall(r'<a class="child" href="#path=(root/host-b/rank\d)"', dom)
    assert links == ["root/host-b/rank0", "root/host-b/rank1", "root/host-b/rank2"]
