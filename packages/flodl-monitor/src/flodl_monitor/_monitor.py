"""``Monitor``: one console line per epoch, resources, alerts, live dashboard, reports."""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from flodl_core import ConfigError, check_int

from ._alerts import Alert, LossWatch
from ._eta import EtaEstimator
from ._export import csv_text, log_text, render_page, write_atomic
from ._format import epoch_line, finish_line
from ._hub import Hub, sse_frame
from ._identity import ModelIdentity, identify
from ._paths import split_path
from ._profiled import diagram_svg
from ._recordlog import RecordLog
from ._records import Record, RecordTree
from ._resources import ResourceSample, ResourceSampler
from ._server import DashboardServer, make_app

logger = logging.getLogger("flodl.monitor")

T = TypeVar("T")


@dataclass(frozen=True)
class EpochRecord:
    """One logged epoch (``epoch`` is 0-based). Durations in seconds."""

    epoch: int
    total: int
    duration: float
    elapsed: float  # wall time since the Monitor was created
    metrics: dict[str, float]
    resources: ResourceSample = field(default_factory=ResourceSample)
    eta: float | None = None  # seconds left (see flodl_monitor._eta); None on the last epoch

    def to_json(self) -> dict[str, Any]:
        """The dashboard's epoch object (NaN/inf metrics become ``null``)."""
        obj: dict[str, Any] = {
            "epoch": self.epoch + 1,
            "total": self.total,
            "duration": round(self.duration, 4),
            "elapsed": round(self.elapsed, 3),
            "metrics": {k: _json_value(v) for k, v in self.metrics.items()},
            "resources": self.resources.to_json(),
        }
        if self.eta is not None:
            obj["eta"] = round(self.eta, 1)
        if self.resources.gpus:
            obj["gpus"] = [g.to_json() for g in self.resources.gpus]
        return obj


def _json_value(v: float) -> float | None:
    """8 significant digits (not decimals: a 1e-9 learning rate must survive); NaN -> null."""
    return float(f"{v:.8g}") if math.isfinite(v) else None


def _seconds(elapsed: float | datetime.timedelta) -> float:
    if isinstance(elapsed, datetime.timedelta):
        return elapsed.total_seconds()
    if isinstance(elapsed, bool) or not isinstance(elapsed, (int, float)):
        kind = type(elapsed).__name__
        raise ConfigError(f"elapsed must be seconds (float) or a timedelta, got {kind}")
    return float(elapsed)


class Monitor:
    """Training monitor for ``total_epochs`` epochs.

    ``log(epoch, elapsed, metrics_or_model)`` prints one line, samples resources, records the
    epoch (at ``record_path`` of :attr:`records`, ``None`` to keep the tree for others) and feeds
    the dashboard if :meth:`serve` was called. ``stream`` defaults to ``sys.stdout``; ANSI styling
    is used only when it is a terminal, so log files get plain lines.
    """

    def __init__(
        self,
        total_epochs: int,
        *,
        stream: TextIO | None = None,
        record_path: str | None = "root",
        records: RecordTree | None = None,
        stall_patience: int = 10,
        resources: bool | ResourceSampler = True,
        color: bool | None = None,
    ) -> None:
        self.total = check_int(total_epochs, "total_epochs", ge=1)
        if stream is not None and not callable(getattr(stream, "write", None)):
            # A file name here would fail only at the first log(), far from the mistake.
            raise ConfigError(
                f"stream must be a text stream with write() (sys.stdout, an open file), got "
                f"{type(stream).__name__} {stream!r}; to log to a file, pass open(path, 'w')"
            )
        if records is not None and not isinstance(records, RecordTree):
            raise ConfigError(
                f"records must be a RecordTree (another monitor's .records, to share its tree), "
                f"got {type(records).__name__}"
            )
        self._stream = stream
        self._color = color
        self._start = time.perf_counter()
        self._eta = EtaEstimator(self.total, self._start)
        if isinstance(resources, ResourceSampler):
            self._sampler: ResourceSampler | None = resources
        else:
            self._sampler = ResourceSampler() if resources else None
        self.hardware = self._sampler.hardware_summary() if self._sampler else ""
        self.records = records if records is not None else RecordTree()
        self.record_path = record_path
        if record_path is not None:
            split_path(record_path)
        self._watch = LossWatch(record_path or "root", patience=stall_patience)
        self._lock = threading.Lock()
        self._history: list[EpochRecord] = []
        self._epochs_json: list[dict[str, Any]] = []
        self._alerts: list[Alert] = []
        self._hubs: list[Hub] = []
        self._server: DashboardServer | None = None
        self._record_log: RecordLog | None = None
        self._html: dict[Path, str] = {}  # path -> initial view, rewritten by finish()
        self._identity = ModelIdentity()
        self._svg: str | None = None
        self._meta: dict[str, Any] = {}
        self._finished_at: float | None = None
        self._last_stale_check = 0.0
        self.records.add_listener(self._on_tree)

    # ---- console ---------------------------------------------------------------------------

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    def _use_color(self) -> bool:
        if self._color is not None:
            return self._color
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty()) and "NO_COLOR" not in os.environ

    def _print(self, line: str, level: int = logging.INFO) -> None:
        if logging.getLogger("flodl").isEnabledFor(level):
            print(line, file=self.stream, flush=True)

    # ---- the model -------------------------------------------------------------------------

    def _set_identity(self, ident: ModelIdentity) -> None:
        """Keep the identity and send it to live pages (a page opened before the first log()
        was rendered without it)."""
        self._identity = ident
        obj = {"label": ident.label, "hash": ident.hash, "parameters": ident.parameters}
        with self._lock:
            for hub in self._hubs:
                hub.identity_threadsafe(obj)

    def watch(self, model: Any) -> None:
        """Capture the model's label, structural hash, parameter counts and graph SVG if offered."""
        self._watch_model(model, profiled=False)

    def watch_profiled(self, model: Any) -> None:
        """Like :meth:`watch`, with the SVG heat-coloured by the model's last profiled forward
        (each node's time and each level's wall time written on it); the plain SVG, with a
        warning, when there is no profile yet. Live pages load it from ``/graph.svg``; saved
        pages carry it."""
        self._watch_model(model, profiled=True)

    def finish_with(self, model: Any) -> None:
        """Redraw the graph SVG with the profiling heat map of the run's last profiled forward,
        then :meth:`finish` (so the reports written there carry it)."""
        if self._finished_at is None:
            self._watch_model(model, profiled=True)
        self.finish()

    def _watch_model(self, model: Any, *, profiled: bool) -> None:
        self._set_identity(identify(model))
        svg = diagram_svg(model, profiled=profiled)
        if svg is not None:
            self.set_svg(svg)

    def set_svg(self, svg: str) -> None:
        self._svg = svg

    def set_identity(self, label: str | None, structural_hash: str | None) -> None:
        self._set_identity(ModelIdentity(label, structural_hash, self._identity.parameters))

    def set_metadata(self, metadata: Mapping[str, Any]) -> None:
        """Free-form key/values shown in the page header (JSON-serialisable)."""
        if not isinstance(metadata, Mapping):
            raise ConfigError(f"metadata must be a dict, got {type(metadata).__name__}")
        for key, value in metadata.items():
            # Checked now: a bad value would otherwise break every page and report later.
            try:
                json.dumps({key: value}, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise ConfigError(
                    f"metadata[{key!r}] = {value!r} is not JSON-serialisable ({e}); "
                    "use strings, finite numbers, booleans, None, lists and dicts"
                ) from None
        self._meta = dict(metadata)

    # ---- logging an epoch ------------------------------------------------------------------

    def log(
        self,
        epoch: int,
        elapsed: float | datetime.timedelta,
        metrics_or_model: Mapping[str, float] | Any = None,
        *,
        metrics: Mapping[str, float] | None = None,
        model: Any = None,
    ) -> EpochRecord:
        """Record epoch ``epoch`` (0-based) that took ``elapsed`` seconds.

        ``metrics_or_model`` is a ``{name: float}`` dict or an observable model
        (``latest_metrics()``); pass both through ``model=`` and ``metrics=`` (extras).
        """
        if isinstance(metrics_or_model, Mapping):
            metrics = {**metrics_or_model, **(metrics or {})}
        elif metrics_or_model is not None:
            model = metrics_or_model
        values = self._collect(model, metrics)
        epoch = check_int(epoch, "epoch", ge=0, le=self.total - 1, note="0-based")
        if self._history and epoch <= self._history[-1].epoch:
            prev = self._history[-1].epoch
            raise ConfigError(f"epoch {epoch} logged after epoch {prev}; epochs must increase")
        duration = _seconds(elapsed)
        if not math.isfinite(duration) or duration < 0:
            raise ConfigError(f"elapsed must be finite and >= 0 seconds, got {duration!r}")
        if self._finished_at is not None:
            raise ConfigError("log() after finish(): create a new Monitor for a new run")

        now = time.perf_counter()
        rec = EpochRecord(
            epoch=epoch,
            total=self.total,
            duration=duration,
            elapsed=now - self._start,
            metrics=values,
            resources=self._sampler.sample() if self._sampler else ResourceSample(),
            eta=self._eta.update(epoch, duration, now),
        )
        obj = rec.to_json()
        with self._lock:
            self._history.append(rec)
            self._epochs_json.append(obj)
            for hub in self._hubs:
                hub.epoch_threadsafe(obj)
        r = rec.resources
        line = epoch_line(
            epoch,
            self.total,
            values,
            duration,
            rec.eta,
            vram_alloc=r.vram_alloc,
            vram_total=r.vram_total,
            gpu_util=r.gpu,
            color=self._use_color(),
        )
        self._print(line)
        if self.record_path is not None:
            self.records.publish(self.record_path, values, step=epoch)
        for alert in self._watch.check(epoch, values):
            self.records.alert(alert)
        tick = time.monotonic()
        if tick - self._last_stale_check >= 1.0:  # O(leaves): at most once a second
            self._last_stale_check = tick
            self.records.check_stale()
        return rec

    def track(self, batches: Iterable[T]) -> Iterator[T]:
        """``batches`` unchanged (``for batch in monitor.track(loader.epoch(e))``), with the
        steps of the first epoch's training loop timed, so that its ETA leaves out the first
        steps' warm-up (the loop is counted at the pace of its later half) as well as
        everything before the loop.

        Optional: without it the first ETA uses the duration given to :meth:`log`; from the
        second epoch on the ETA is the steady-state wall time per epoch either way. Only the
        first loop tracked before the first :meth:`log` is timed (an evaluation loop after it
        is not); later epochs pass through untimed.
        """
        if not self._eta.loop_started(time.perf_counter()):
            yield from batches
            return
        for item in batches:
            yield item  # the caller's step runs here
            self._eta.step_ended(time.perf_counter())

    def _collect(self, model: Any, extras: Mapping[str, float] | None) -> dict[str, float]:
        out: dict[str, float] = {}
        if model is not None:
            latest = getattr(model, "latest_metrics", None)
            if not callable(latest):
                raise ConfigError(
                    f"log() got a {type(model).__name__}; expected a dict of floats or a model "
                    "with latest_metrics() (flodl_core.Observable)"
                )
            if self._identity.empty:
                self._set_identity(identify(model))
            out.update(latest())
        out.update(extras or {})
        if not out:
            raise ConfigError("log() needs metrics: a dict of floats, a model, or both")
        values: dict[str, float] = {}
        for name, v in out.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"metric names must be non-empty strings, got {name!r}")
            try:
                values[name] = float(v)
            except (TypeError, ValueError):
                raise ConfigError(f"metric {name!r} is {v!r}; expected a number") from None
        return values

    def _on_tree(self, kind: str, item: Record | Alert) -> None:
        if isinstance(item, Alert):
            with self._lock:
                self._alerts.append(item)
                for hub in self._hubs:
                    hub.alert_threadsafe(item.to_json())
            self._print(f"  ! {item.kind}: {item.message}", logging.WARNING)
        else:
            for hub in self._hubs:
                hub.record_threadsafe(item.path, item.step)

    # ---- end of run ------------------------------------------------------------------------

    @property
    def elapsed(self) -> float:
        end = self._finished_at if self._finished_at is not None else time.perf_counter()
        return end - self._start

    def finish(self) -> None:
        """Print the summary line, tell live pages the run is complete and write the reports
        registered with :meth:`save_html` / :meth:`save_dashboard`. The server keeps serving
        until :meth:`stop` or the process ends (a script that ends right away takes the page
        with it: call :meth:`keep_serving` to wait for Ctrl-C). Idempotent."""
        if self._finished_at is not None:
            return
        self._finished_at = time.perf_counter()
        last = self._history[-1].metrics if self._history else {}
        self._print(finish_line(self.elapsed, last, color=self._use_color()))
        with self._lock:
            for hub in self._hubs:
                hub.complete_threadsafe(self._complete())
        if self.record_path is not None and self.record_path in self.records:
            self.records.close(self.record_path)
        if self._sampler is not None:
            self._sampler.close()
        for path, view in self._html.items():
            write_atomic(path, self._archive(view))
        if self._record_log is not None:
            self._record_log.close()

    def _complete(self) -> dict[str, Any]:
        return {"epochs": len(self._history), "total_s": round(self.elapsed, 3)}

    def stop(self) -> None:
        """Stop the dashboard server, if any (idempotent)."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def close(self) -> None:
        """:meth:`finish` then :meth:`stop`."""
        self.finish()
        self.stop()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is KeyboardInterrupt:
            # Ctrl-C mid-run: the reports registered with save_html/save_dashboard are written
            # with the epochs logged so far, and the console says where they went.
            self._print("  interrupted (Ctrl-C): writing the partial report", logging.WARNING)
        self.close()

    def keep_serving(self, timeout: float | None = None) -> None:
        """Block, serving the dashboard, until Ctrl-C (or ``timeout`` seconds), then stop.

        For scripts whose run ends before anyone opens the page: call it after :meth:`finish`.
        Without a server it returns at once. Ctrl-C is caught here and ends the wait cleanly.
        """
        if self._server is None:
            return
        self.finish()
        wait = "" if timeout is None else f" for {timeout:g} s"
        self._print(f"  dashboard still serving at {self._server.url}{wait}; press Ctrl-C to stop")
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            while deadline is None or time.monotonic() < deadline:
                left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                time.sleep(max(left, 0.0))
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    # ---- reading ---------------------------------------------------------------------------

    @property
    def history(self) -> list[EpochRecord]:
        with self._lock:
            return list(self._history)

    @property
    def alerts(self) -> list[Alert]:
        with self._lock:
            return list(self._alerts)

    @property
    def url(self) -> str | None:
        """The live page's address once :meth:`serve` was called."""
        return self._server.url if self._server is not None else None

    # ---- dashboard -------------------------------------------------------------------------

    def serve(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        max_clients: int = 64,
        allowed_hosts: Iterable[str] = (),
    ) -> str:
        """Serve the live dashboard from a separate process; returns (and prints) its URL.

        Binds loopback unless ``host`` says otherwise; ``port=0`` picks a free port. Requests
        must name the dashboard in their ``Host`` header (``localhost``, ``127.0.0.1``,
        ``[::1]``, the address connected to, ``host``) on its port, else they get 403 (a guard
        against DNS rebinding); ``allowed_hosts`` adds names (``"name"``, ``"name:port"`` behind
        a proxy, ``"*"`` to accept any).
        """
        if self._server is not None:
            raise ConfigError(f"already serving at {self._server.url}; call stop() first")
        server = DashboardServer(
            self, host, port, max_clients=max_clients, allowed_hosts=allowed_hosts
        )
        url = server.start()
        self._server = server
        self._print(f"  dashboard: {url}")
        return url

    def app(self, **opts: Any) -> Any:
        """The dashboard as an ``aiohttp.web.Application`` (to mount or test it yourself)."""
        return make_app(self, **opts)

    def _boot(self, mode: str, view: str = "training") -> dict[str, Any]:
        ident = self._identity
        boot: dict[str, Any] = {
            "mode": mode,
            "view": view,
            "total": self.total,
            "label": ident.label,
            "hash": ident.hash,
            "parameters": ident.parameters,
            "hardware": self.hardware,
            "meta": self._meta,
            "has_svg": self._svg is not None,
        }
        return boot

    def page(self) -> str:
        return render_page(self._boot("live"))

    def graph_svg(self) -> str | None:
        return self._svg

    def epochs(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._epochs_json)

    def attach(self, hub: Hub) -> None:
        with self._lock:
            hub.seed(list(self._epochs_json))
            hub.alert_frames = [sse_frame("alert", a.to_json()) for a in self._alerts[-200:]]
            if self._finished_at is not None:
                hub.complete = sse_frame("complete", self._complete())
            ident = self._identity
            if not ident.empty:
                hub.identity = sse_frame(
                    "identity",
                    {"label": ident.label, "hash": ident.hash, "parameters": ident.parameters},
                )
            self._hubs.append(hub)

    def detach(self, hub: Hub) -> None:
        with self._lock:
            self._hubs = [h for h in self._hubs if h is not hub]

    # ---- files -----------------------------------------------------------------------------

    def _archive(self, view: str) -> str:
        boot = self._boot("archive", view)
        with self._lock:
            boot["epochs"] = list(self._epochs_json)
            boot["alerts"] = [a.to_json() for a in self._alerts]
        boot["svg"] = self._svg
        boot["complete"] = self._complete() if self._finished_at is not None else None
        boot["tree"] = self.records.snapshot()
        return render_page(boot, title="flodl Training Report")

    def save_html(self, path: str | os.PathLike[str]) -> Path:
        """Write the dashboard with all data baked in as one offline file (opens from file://).

        Written now; if the run is not finished, :meth:`finish` rewrites it with the final data.
        """
        return self._save(Path(path), "training")

    def save_dashboard(self, path: str | os.PathLike[str]) -> Path:
        """Like :meth:`save_html`, opening on the record tree (the per-rank portal)."""
        return self._save(Path(path), "records")

    def _save(self, path: Path, view: str) -> Path:
        written = write_atomic(path, self._archive(view))
        # Registered only once written: a path that cannot be written must not make finish()
        # fail again (and skip closing the record log).
        if self._finished_at is None:
            self._html[path] = view
        return written

    def export_csv(self, path: str | os.PathLike[str]) -> Path:
        """One row per epoch; see :func:`flodl_monitor.csv_text` for the columns."""
        return write_atomic(path, csv_text(self.history))

    def write_log(self, path: str | os.PathLike[str]) -> Path:
        """The plain-text training log (``# flodl training log`` ... ``# total: 2.8s``)."""
        return write_atomic(path, log_text(self.history, self.total, self.elapsed))

    def record_log(self, directory: str | os.PathLike[str], cap_bytes: int = 0) -> RecordLog:
        """Append every record and alert from now on to JSONL files under ``directory``
        (``root/host-a/rank1`` -> ``root/host-a/rank1.jsonl``), capped at ``cap_bytes`` per node
        (0: 32 MiB)."""
        if self._record_log is not None:
            raise ConfigError(f"already logging records to {self._record_log.directory}")
        self._record_log = RecordLog(directory, cap_bytes)
        self.records.add_listener(self._record_log)
        return self._record_log
