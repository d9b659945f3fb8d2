"""The dashboard page in a real headless Chromium: live during a run, and the offline files.

The page writes its state into the DOM (``data-epochs`` on body, ``data-points`` on every drawn
curve), so ``--dump-dom`` is enough to check it; no Selenium or Playwright needed.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
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


def _dump(url: str, profile: Path, window: tuple[int, int] | None = None) -> str:
    """The DOM after the page's scripts ran, from a headless Chromium that leaves nothing behind."""
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (CI installs it with .ci/browser.sh)")
    size = [f"--window-size={window[0]},{window[1]}"] if window else []
    args = [CHROMIUM, *FLAGS, *size, f"--user-data-dir={profile}", "--virtual-time-budget=8000"]
    # Its own process group: on a timeout or a failure the browser's helper processes
    # (zygote, renderer) go with it.
    proc = subprocess.Popen(
        [*args, "--dump-dom", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=90)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 0, err[-2000:]
    return out


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


# Injected into the served page. Headless Chromium keeps its window at least 500 px wide, so the
# probe loads the page again in a 420 px iframe (same origin, so it can look inside), writes that
# frame's layout measurements into the top page's <body data-probe-*>, and (CLICK) ticks the
# frame's log-scale box once every epoch has arrived.
PROBE = """<script>
(() => {
  if (window.top !== window) return;
  const f = document.createElement("iframe");
  f.style.cssText = "position:absolute;left:0;top:0;width:420px;height:900px;border:0";
  f.src = location.href;
  document.body.appendChild(f);
  const b = document.body.dataset;
  const measure = () => {
    const d = f.contentDocument;
    if (!d || !d.body) return;
    const de = d.documentElement, fb = d.body.dataset, vw = de.clientWidth, out = [];
    b.probeEpochs = fb.epochs; b.probeLossScale = fb.lossScale;
    b.probeScrollWidth = String(de.scrollWidth); b.probeClientWidth = String(vw);
    b.probeInnerWidth = String(f.contentWindow.innerWidth);
    for (const el of d.querySelectorAll("body *")) {
      if (el.parentElement.closest(".tablewrap")) continue;  // a wide table scrolls in its box
      const r = el.getBoundingClientRect();
      if (r.width > 0 && (r.right > vw + 0.5 || r.left < -0.5))
        out.push(el.tagName + (el.id ? "#" + el.id : "") + "/" + (el.dataset.chart || ""));
    }
    b.probeOverflow = out.slice(0, 12).join(" ");
    const cards = [...d.querySelectorAll(".card[data-chart]")];
    b.probeCards = String(cards.length);
    const lefts = cards.map((c) => Math.round(c.getBoundingClientRect().left));
    b.probeColumns = String(new Set(lefts).size);
    const toggle = d.querySelector('[data-chart="metric-Loss"] .log-toggle');
    b.probeToggle = toggle ? "yes" : "no";
    if (CLICK && toggle && !window.probeClicked && fb.epochs === String(EPOCHS)) {
      b.probeScaleBefore = fb.lossScale;
      window.probeClicked = true;
      toggle.click();
    }
  };
  setInterval(measure, 150);
})();
</script>"""


def _probe_page(m: Monitor, *, click: bool, epochs: int) -> None:
    """Serve ``m``'s page with :data:`PROBE` at the end of the body."""
    page = type(m).page
    script = PROBE.replace("CLICK", json.dumps(click)).replace("EPOCHS", str(epochs))
    m.page = lambda: page(m).replace("</body>", script + "</body>", 1)  # type: ignore[method-assign]


LONG = "tokens_per_second_measured_over_every_rank_of_the_cluster_including_padding"


def test_narrow_window_log_scale_toggle_and_ram_axis(tmp_path: Path) -> None:
    """420 px wide: nothing overflows, the cards stack; the loss log scale is a checkbox whose
    choice survives a reload; values <= 0 are left out of the log scale (and counted); the RAM
    axis ends at the machine's RAM."""
    total = 8
    m = Monitor(total, stream=io.StringIO(), record_path=None)
    url = m.serve(0)
    profile = tmp_path / "profile"  # one profile for both visits: localStorage carries over
    try:
        for e in range(total):
            val = 0.0 if e == 3 else 2.2 * math.exp(-e / 4)  # a 0 cannot sit on a log axis
            metrics = {"loss": 2 * math.exp(-e / 4), "val.loss": val, "acc": e / total}
            metrics[LONG] = 1000.0 + e  # a long unbroken name must wrap, not widen the page
            m.log(e, 0.01, metrics)
        m.finish()
        _probe_page(m, click=True, epochs=total)
        first = _dump(url, profile, window=(420, 900))
        _probe_page(m, click=False, epochs=total)
        second = _dump(url, profile, window=(420, 900))
        ram_total = m.epochs()[-1]["resources"].get("ram_total")
    finally:
        m.stop()

    for dom in (first, second):
        body = _body(dom)
        assert body["epochs"] == body["probe-epochs"] == str(total)
        assert body["probe-inner-width"] == "420"
        assert int(body["probe-scroll-width"]) <= int(body["probe-client-width"]), body
        assert body["probe-overflow"] == "", body["probe-overflow"]
        assert int(body["probe-cards"]) >= 4 and body["probe-columns"] == "1"  # one column
        assert body["probe-toggle"] == "yes"

    # First visit: linear by default, then the click switched the loss chart to log.
    body = _body(first)
    assert body["loss-scale"] == body["probe-scale-before"] == "linear"
    assert body["probe-loss-scale"] == "log"
    # Second visit, no click: the choice came back from localStorage (in both pages).
    body = _body(second)
    assert "probe-scale-before" not in body
    assert body["loss-scale"] == body["probe-loss-scale"] == "log"
    card = _card(second, "metric-Loss")
    assert card["scale"] == "log" and card["hidden"] == "1"
    lo, hi = math.log10(float(card["ymin"])), math.log10(float(card["ymax"]))
    assert lo.is_integer() and hi.is_integer() and lo < hi  # whole decades
    assert 10**lo <= 2 * math.exp(-(total - 1) / 4) and 10**hi >= 2.2
    assert _curves(second, "metric-Loss") == {"loss": total, "val.loss": total - 1}
    assert "1 value ≤ 0 not drawn on the log scale" in second
    assert 'class="log-toggle" checked' in second
    assert _card(second, "metric-acc")["scale"] == "linear"  # only losses switch
    assert _curves(second, f"metric-{LONG}") == {LONG: total}

    if sys.platform.startswith("linux"):
        assert isinstance(ram_total, int) and ram_total > 0
    if ram_total:
        ram = _card(second, "ram")
        assert float(ram["ymin"]) == 0 and int(float(ram["ymax"])) == ram_total


def _card(dom: str, chart: str) -> dict[str, str]:
    tag = re.search(rf'<div class="card" data-chart="{re.escape(chart)}"([^>]*)>', dom)
    assert tag is not None, f"no chart {chart!r}"
    return dict(re.findall(r'data-([\w-]+)="([^"]*)"', tag.group(1)))
