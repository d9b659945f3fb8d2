"""The per-run record, ``runs/<model>/<mode>/run.json``: everything the report and the baseline
check are computed from, so a report can be rebuilt from the files alone."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from flodl_core import DataError

from ._files import write_text_atomic

FORMAT = "ddp-bench-run/1"
RECORD_NAME = "run.json"


@dataclass
class EpochRow:
    """One epoch: mean training loss, eval on the held-out split, and the DDP telemetry."""

    epoch: int
    loss: float
    eval: float | None = None
    epoch_ms: float | None = None
    syncs: int | None = None
    avg_sync_ms: float | None = None
    batch_share: list[float] | None = None
    throughput: list[float] | None = None
    """Per rank, samples over the epoch's wall time (``EpochMetrics.per_rank_throughput``)."""
    rank_speed: list[float] | None = None
    """Per rank, samples over its compute time (forward, backward, optimizer step and the
    slowdown's pauses: what the rank's device delivers while it trains); absent in older
    records."""
    anchor: int | None = None
    lr: float | None = None


@dataclass
class RankTime:
    """Seconds rank ``rank`` spent in each kind of span, from the run's timeline."""

    rank: int
    compute_s: float = 0.0
    sync_s: float = 0.0
    data_s: float = 0.0
    idle_s: float = 0.0
    wall_s: float = 0.0
    idle_causes: dict[str, float] = field(default_factory=dict)

    @property
    def busy_pct(self) -> float:
        return (
            100.0 * (self.compute_s + self.sync_s + self.data_s) / self.wall_s
            if self.wall_s
            else 0.0
        )

    @property
    def idle_pct(self) -> float:
        return 100.0 * self.idle_s / self.wall_s if self.wall_s else 0.0


@dataclass
class RunRecord:
    """One (model, mode) run. ``status`` is ``"complete"`` or ``"incomplete"`` (``error`` says
    why); ``eval_name`` is ``accuracy`` (%), ``val_ce`` or ``mse``."""

    model: str
    mode: str
    status: str
    dataset: str
    data_source: str
    synthetic: bool
    devices: list[str]
    slowdown: dict[str, float]
    seed: int
    batch_size: int
    epochs_planned: int
    batches_per_epoch: int | None
    lr_scale: float
    eval_name: str
    higher_is_better: bool
    target: float | None
    hardware: dict[str, Any]
    started: str
    total_s: float  # wall time from launch to join, process start-up included
    epochs: list[EpochRow] = field(default_factory=list)
    ranks: list[RankTime] = field(default_factory=list)
    anchor_changes: int | None = None
    throttles: int | None = None
    error: str | None = None
    eval_samples: int | None = None  # held-out samples behind each eval (absent in old records)
    repeat_train_s: list[float] | None = None
    """``--repeats``: the training times of every complete run of this cell in the invocation,
    in run order (this record is the last run's); absent for a single run."""
    repeat_seeds: list[int] | None = None
    """The seed of each run in :attr:`repeat_train_s` (``--seeds``); absent in older records."""
    repeat_evals: list[float | None] | None = None
    """The final eval of each run in :attr:`repeat_train_s`; absent in older records."""
    peak_memory: list[int] | None = None
    """Per rank, the most device memory its tensors held during the run (bytes; 0 on a CPU rank,
    where torch keeps no count); absent in records older than this field."""
    bound_cores: bool | None = None
    """Whether the run's ranks were bound to their own cores (``--no-bind-cores``); absent in
    older records."""
    repeat_losses: list[float | None] | None = None
    """The final training loss of each run in :attr:`repeat_train_s`; absent in older records."""
    slow_factor: float | None = None
    """The slow factor of the sweep point this run belongs to (``--slow-factors``: the last
    device slowed that many times; solo runs carry their point's too); ``None`` outside a
    sweep."""

    @property
    def final_loss(self) -> float | None:
        return self.epochs[-1].loss if self.epochs else None

    @property
    def final_eval(self) -> float | None:
        evals = [e.eval for e in self.epochs if e.eval is not None]
        return evals[-1] if evals else None

    def seed_evals(self) -> dict[int, float]:
        """Final eval per seed: the mean of the cell's runs on that seed when it ran several
        times (``--repeats`` / ``--seeds``), else this run's alone."""
        if self.repeat_seeds and self.repeat_evals:
            per_seed: dict[int, list[float]] = {}
            for seed, ev in zip(self.repeat_seeds, self.repeat_evals, strict=True):
                if ev is not None:
                    per_seed.setdefault(seed, []).append(ev)
            return {s: statistics.fmean(evs) for s, evs in per_seed.items()}
        ev = self.final_eval
        return {} if ev is None else {self.seed: ev}

    @property
    def eval_mean(self) -> float | None:
        """The eval the report shows: the mean over the cell's seeds (one mean per seed, then
        their mean) when it ran on several, else :attr:`final_eval`."""
        per_seed = self.seed_evals()
        if len(per_seed) > 1:
            return statistics.fmean(per_seed.values())
        return self.final_eval

    @property
    def loss_mean(self) -> float | None:
        """The final training loss averaged over the cell's runs (``--repeats`` / ``--seeds``),
        else :attr:`final_loss`: what the baseline keeps and checks."""
        losses = [v for v in self.repeat_losses or () if v is not None]
        return statistics.fmean(losses) if losses else self.final_loss

    @property
    def train_s(self) -> float:
        """Seconds of training: the sum of the epochs' wall times (process start-up excluded,
        so a short run on spawned ranks is compared fairly with one in-process)."""
        times = [e.epoch_ms for e in self.epochs if e.epoch_ms is not None]
        return sum(times) / 1000 if times else self.total_s

    @property
    def speed_s(self) -> float:
        """The training time speed comparisons use: the median over ``--repeats`` runs, else
        this run's :attr:`train_s`."""
        if self.repeat_train_s:
            return float(statistics.median(self.repeat_train_s))
        return self.train_s

    @property
    def syncs(self) -> int | None:
        counts = [e.syncs for e in self.epochs if e.syncs is not None]
        return sum(counts) if counts else None

    @property
    def avg_sync_ms(self) -> float | None:
        pairs = [
            (e.syncs, e.avg_sync_ms) for e in self.epochs if e.syncs and e.avg_sync_ms is not None
        ]
        n = sum(s for s, _ in pairs)
        return sum(s * ms for s, ms in pairs) / n if n else None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **_finite(asdict(self))}

    @classmethod
    def from_json(cls, obj: dict[str, Any], where: str = "record") -> RunRecord:
        if obj.get("format") != FORMAT:
            raise DataError(f"{where}: format is {obj.get('format')!r}, expected {FORMAT!r}")
        data = {k: v for k, v in obj.items() if k != "format"}
        try:
            data["epochs"] = [EpochRow(**e) for e in data.get("epochs", [])]
            data["ranks"] = [RankTime(**r) for r in data.get("ranks", [])]
            return cls(**data)
        except TypeError as e:
            raise DataError(f"{where}: not a ddp-bench run record ({e})") from e


def _finite(obj: Any) -> Any:
    """NaN and infinities become ``None``: the records are strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def save_record(record: RunRecord, folder: Path) -> Path:
    """Write ``folder/run.json`` atomically."""
    return write_text_atomic(folder / RECORD_NAME, json.dumps(record.to_json(), indent=1) + "\n")


def load_record(path: Path) -> RunRecord:
    try:
        obj = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot read the run record ({e})") from e
    if not isinstance(obj, dict):
        raise DataError(f"{path}: a run record is a JSON object")
    return RunRecord.from_json(obj, str(path))


def load_records(output: Path) -> list[RunRecord]:
    """Every current ``<output>/<model>/<mode>/run.json`` (rotated older records are skipped)."""
    return [load_record(p) for p in sorted(output.glob(f"*/*/{RECORD_NAME}"))]
