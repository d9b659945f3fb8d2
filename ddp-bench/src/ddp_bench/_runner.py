"""One (model, mode) run through flodl-ddp's managed trainer, and the files it leaves in
``<output>/<model>/<mode>/``: ``training.log``, ``timeline.{json,csv,html}``, ``dashboard.html``
and ``run.json`` (earlier ones rotated first)."""

from __future__ import annotations

import datetime
import io
import logging
import math
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flodl_core import ConfigError
from flodl_ddp import Trainer
from flodl_ddp.testing import check_bindable
from flodl_monitor import Monitor

from ._cells import is_solo, outer_optimizer, trainer_mode
from ._config import BenchConfig
from ._files import write_text_atomic
from ._record import EpochRow, RankTime, RunRecord, save_record
from ._rotate import rotate
from ._task import EvalFn, ModelFactory, OptimFactory, SchedFactory, TrainStep
from ._timeline_stats import rank_times
from .data import DataBundle, load_dataset
from .models import SPECS

Log = Callable[[str], None]


def run_devices(cfg: BenchConfig, mode: str) -> tuple[list[str], dict[int, float]]:
    """The devices and slowdown of a run: ``solo-N`` is device N alone (with rank N's slowdown
    as its own), a DDP mode uses every device."""
    if is_solo(mode):
        n = int(mode[5:])
        slow = {0: cfg.slowdown[n]} if n in cfg.slowdown else {}
        return [cfg.devices[n]], slow
    return list(cfg.devices), dict(cfg.slowdown)


def _eval_value(v: Any, name: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, dict):
        v = v.get(name, next(iter(v.values()), None))
    return None if v is None or not math.isfinite(float(v)) else float(v)


def _row(m: Any, eval_name: str, solo: bool = False) -> EpochRow:
    """One epoch's row; a solo run (one device alone) has no averaging, so no syncs, batch
    shares or anchor, whatever the trainer's metrics of a one-rank world hold."""
    lr = getattr(m, "lr", None)
    syncs = None if solo else getattr(m, "syncs", None)
    sync_ms = None if solo else getattr(m, "avg_sync_ms", None)
    shares = None if solo else [float(x) for x in (m.per_rank_batch_share or [])] or None
    return EpochRow(
        epoch=int(m.epoch),
        loss=float(m.avg_loss),
        eval=_eval_value(getattr(m, "eval", None), eval_name),
        epoch_ms=float(m.epoch_ms),
        syncs=int(syncs) if syncs is not None else None,
        avg_sync_ms=float(sync_ms) if sync_ms is not None else None,
        batch_share=shares,
        throughput=[float(x) for x in (m.per_rank_throughput or [])] or None,
        rank_speed=[
            p.samples / (p.compute_ms / 1000.0) if p.compute_ms > 0 else 0.0
            for p in (m.per_rank or [])
        ]
        or None,
        anchor=None if solo else m.anchor,
        lr=float(lr) if lr is not None and math.isfinite(lr) else None,
    )


def epoch_line(row: EpochRow, synthetic: bool) -> str:
    """``epoch N: loss=x.xxxxxx, eval=y.yyyy`` (1-based N), marked when the data is synthetic."""
    ev = "n/a" if row.eval is None else f"{row.eval:.4f}"
    extra = f" ({row.epoch_ms / 1000:.1f}s"
    extra += f", {row.syncs} syncs" if row.syncs is not None else ""
    extra += f", anchor {row.anchor})" if row.anchor is not None else ")"
    tag = " [synthetic]" if synthetic else ""
    return f"epoch {row.epoch + 1}: loss={row.loss:.6f}, eval={ev}{extra}{tag}"


def _timeline_times(timeline: Any, world: int) -> tuple[list[RankTime], int | None, int | None]:
    """Per-rank times from the trainer's timeline, plus its anchor-change and throttle counts."""
    if timeline is None:
        return [], None, None
    spans = [(s.rank, s.kind, s.start_s, s.end_s) for s in timeline.spans]
    events = [(e.kind, e.t) for e in timeline.events]
    kinds = [k for k, _ in events]
    return rank_times(spans, events, world), kinds.count("anchor_changed"), kinds.count("throttle")


def _ranks_from_metrics(rows: list[Any], world: int) -> list[RankTime]:
    """Fallback accounting from the per-epoch rank metrics when no timeline is available."""
    out = [RankTime(rank=r) for r in range(world)]
    for m in rows:
        for rm in m.per_rank:
            rt = out[rm.rank]
            rt.compute_s += rm.compute_ms / 1000
            rt.sync_s += rm.sync_ms / 1000
            rt.idle_s += rm.idle_ms / 1000
            rt.idle_causes["untracked"] = rt.idle_causes.get("untracked", 0.0) + rm.idle_ms / 1000
        for rt in out:
            rt.wall_s += m.epoch_ms / 1000
    return out


def binds_cores(cfg: BenchConfig, devices: list[str]) -> bool:
    """Whether a run's CPU ranks are bound to their own cores: several CPU ranks, not
    ``--no-bind-cores``, and a binding the trainer would accept here (its own check: a platform
    that can bind, a core for each one-thread rank). One device trains in the bench's process and
    is never bound."""
    if not cfg.bind_cores or len(devices) < 2 or any(d != "cpu" for d in devices):
        return False
    try:
        check_bindable(len(devices), 1)
    except ConfigError:
        return False
    return True


def _header(
    cfg: BenchConfig,
    run: str,
    bundle: DataBundle,
    devices: list[str],
    slowdown: dict[int, float],
    hw: dict[str, Any],
    epochs: int,
    batch: int,
) -> list[str]:
    """The ``#`` lines that open a run's training.log: what ran, where, on which data."""
    tag = " [synthetic]" if bundle.synthetic else ""
    mode = run.rsplit("/", 1)[-1]
    if is_solo(mode):
        # one device alone: no mode, no peer; its slowdown is that of the rank it stands for
        slow = (
            f" (slowed {slowdown[0]:g}x, as rank {mode[5:]} of the multi-rank runs)"
            if 0 in slowdown
            else ""
        )
        where = f"# device: {devices[0]} alone{slow}, no averaging"
    else:
        slow = ", ".join(f"rank {r} slowed {f:g}x" for r, f in sorted(slowdown.items()))
        outer = outer_optimizer(mode)
        where = (
            f"# devices: {', '.join(devices)}{f' ({slow})' if slow else ''}"
            + (", each rank bound to its own cores" if binds_cores(cfg, devices) else "")
            + f" | mode {trainer_mode(mode)}"
            + (f", outer optimizer {outer!r}" if outer is not None else "")
        )
    return [
        f"# ddp-bench {run}{tag}",
        where + f" | host {hw['host']} | {hw['cpu']} | torch {hw['torch']}",
        f"# data: {bundle.source}",
        f"# {epochs} epoch(s), batch {batch} per rank"
        + (f", at most {cfg.batches} batches per epoch" if cfg.batches else "")
        + f", seed {cfg.seed}",
    ]


def _trainer(
    cfg: BenchConfig,
    model: str,
    mode: str,
    bundle: DataBundle,
    devices: list[str],
    slowdown: dict[int, float],
    epochs: int,
    batch: int,
    monitor: Monitor,
) -> Any:
    """The configured trainer builder of one run (``.run()`` starts it)."""
    spec = SPECS[model]
    b = (
        Trainer.builder(ModelFactory(model, bundle.vocab), OptimFactory(model), TrainStep(model))
        # plain tensors: they travel to spawned ranks through torch's shared-memory pickling
        .dataset(tuple(bundle.train.tensors))
        .batch_size(batch)
        .num_epochs(epochs)
        .devices(devices)
        .seed(cfg.seed)
        .eval_fn(EvalFn(model, str(cfg.data_dir.expanduser().absolute())))
        .timeline(True)
        .monitor(monitor)
    )
    if not is_solo(mode):
        b = b.mode(trainer_mode(mode))
        outer = outer_optimizer(mode)
        if outer is not None:
            b = b.outer_optimizer(outer)
    if slowdown:
        b = b.slowdown(slowdown)
    if all(d == "cpu" for d in devices):
        # A CPU rank trains on one thread; solo-N must too, or it compares N cores against
        # one rank's (on small models torch's intra-op threads even make it ~2x slower).
        b = b.threads_per_rank(1)
        if binds_cores(cfg, devices):
            b = b.bind_cores()
    if cfg.batches:
        b = b.batches_per_epoch(cfg.batches)
    if spec.schedule != "flat":
        b = b.scheduler(SchedFactory(model))
    return b.lr_scale_ratio(cfg.lr_scale)  # (1 + ratio * (world - 1)): no effect on one device


def _start(b: Any, solo: bool) -> Any:
    """``b.run()``; for one device alone without the engine's one-line summary, which would name
    the trainer's default mode (and the slowdown as rank 0's) for a run that has neither: the
    bench's own header says what a solo run is."""
    if not solo:
        return b.run()
    log = logging.getLogger("flodl")  # flodl's logging tree (flodl_core.set_verbosity's)
    before = log.level
    log.setLevel(logging.WARNING)  # warnings still show
    try:
        return b.run()
    finally:
        log.setLevel(before)


def _train(
    b: Any, run: str, eval_name: str, synthetic: bool, lines: list[str], log: Log
) -> tuple[list[EpochRow], list[Any], str | None, Any]:
    """Run the trainer, logging each epoch into ``lines`` and ``log``.

    Returns the epoch rows, the raw metrics, the error (``None`` when it finished) and the
    timeline (``None`` when the run failed before producing one).
    """
    rows: list[EpochRow] = []
    raw: list[Any] = []
    error: str | None = None
    timeline: Any = None
    solo = is_solo(run.rsplit("/", 1)[-1])
    try:
        handle = _start(b, solo)
        while (m := handle.next_metrics()) is not None:
            raw.append(m)
            rows.append(_row(m, eval_name, solo))
            line = epoch_line(rows[-1], synthetic)
            lines.append(line)
            log(f"[{run}] {line}")
        handle.join()
        timeline = handle.timeline()
    except Exception as e:  # the run failed: keep what it produced and say why
        error = f"{type(e).__name__}: {e}".splitlines()[0]
        lines.append(f"# FAILED: {error}")
        lines += ["# " + t for t in traceback.format_exc().rstrip().splitlines()]
        log(f"[{run}] FAILED: {error}")
    return rows, raw, error, timeline


def _save_timeline(
    timeline: Any, raw: list[Any], folder: Path, world: int
) -> tuple[list[RankTime], int | None, int | None]:
    """Write the timeline files (when there is a timeline) and account each rank's time."""
    if timeline is not None:
        timeline.save_json(folder / "timeline.json")
        timeline.save_csv(folder / "timeline.csv")
        timeline.save_html(folder / "timeline.html")
        timeline.save_chrome_trace(folder / "trace.json")
        return _timeline_times(timeline, world)
    if raw:
        return _ranks_from_metrics(raw, world), None, None
    return [], None, None


def run_one(
    cfg: BenchConfig, model: str, mode: str, hw: dict[str, Any], log: Log = print
) -> RunRecord:
    """Train ``model`` in ``mode``; writes the run folder and returns the record (an exception
    inside the run makes an ``incomplete`` record, never a lost one)."""
    spec = SPECS[model]
    bundle = load_dataset(spec.dataset, cfg.data_dir)
    folder = cfg.output / model / mode
    rotate(folder)
    folder.mkdir(parents=True, exist_ok=True)
    devices, slowdown = run_devices(cfg, mode)
    epochs = cfg.epochs or spec.epochs
    batch = cfg.batch_size or spec.batch_size
    tag = " [synthetic]" if bundle.synthetic else ""
    run = f"{model}/{mode}"
    header = _header(cfg, run, bundle, devices, slowdown, hw, epochs, batch)
    lines = list(header)
    for h in header:
        log(f"[{run}] {h}")

    monitor = Monitor(epochs, stream=io.StringIO())
    monitor.set_metadata({"model": model, "mode": mode, "devices": devices, "data": bundle.source})
    if cfg.monitor is not None:
        log(f"[{run}] dashboard: {monitor.serve(cfg.monitor)}")
    b = _trainer(cfg, model, mode, bundle, devices, slowdown, epochs, batch, monitor)

    started = datetime.datetime.now().isoformat(timespec="seconds")
    t0 = time.perf_counter()
    rows, raw, error, timeline = _train(b, run, spec.eval_name, bundle.synthetic, lines, log)
    total = time.perf_counter() - t0
    lines.append(f"total: {total:.1f}s{tag}")
    log(f"[{run}] total: {total:.1f}s{tag}")
    write_text_atomic(folder / "training.log", "\n".join(lines) + "\n")

    ranks, anchor_changes, throttles = _save_timeline(timeline, raw, folder, len(devices))
    monitor.finish()
    monitor.save_dashboard(folder / "dashboard.html")
    monitor.close()

    record = RunRecord(
        model=model,
        mode=mode,
        status="complete" if error is None and len(rows) == epochs else "incomplete",
        dataset=spec.dataset,
        data_source=bundle.source,
        synthetic=bundle.synthetic,
        devices=devices,
        slowdown={str(k): v for k, v in slowdown.items()},
        seed=cfg.seed,
        batch_size=batch,
        epochs_planned=epochs,
        batches_per_epoch=cfg.batches,
        lr_scale=cfg.lr_scale,
        eval_name=spec.eval_name,
        higher_is_better=spec.higher_is_better,
        target=spec.target,
        hardware=hw,
        started=started,
        total_s=total,
        epochs=rows,
        ranks=ranks,
        anchor_changes=anchor_changes,
        throttles=throttles,
        error=error
        if error is not None or len(rows) == epochs
        else f"{len(rows)} of {epochs} epochs",
        eval_samples=len(bundle.test.tensors[0]) if spec.task != "lm" else None,
        peak_memory=[r.peak_memory_bytes for r in raw[-1].per_rank] if raw else None,
        bound_cores=binds_cores(cfg, devices),
        slow_factor=cfg.slow_factor,
    )
    save_record(record, folder)
    return record
