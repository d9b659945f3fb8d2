"""The Markdown report of a set of run records (its sections are listed in ddp-bench/README.md),
computed from the files alone."""

from __future__ import annotations

import datetime
import math
import statistics
from collections.abc import Callable, Sequence

from flodl_ddp.testing import PAY_EVERY_S

from ._cells import DILOCO, is_solo
from ._record import RunRecord
from .models import MODEL_NAMES

SECTIONS = (
    "Hardware",
    "Notes",
    "Incomplete Runs",
    "Per-Model Results",
    "Best Mode per Model",
    "Eval Quality vs solo-0",
    "Convergence Quality vs solo-0",
    "Per-Epoch Loss Trajectory",
    "Speedup vs solo-0",
    "Speedup Breakdown",
    "VRAM Usage",
    "Idle Analysis",
    "Idle Breakdown by Cause",
    "ElChe Calibration",
    "Streaming Epoch Overlap",
)
"""The report's second-level headings, in order."""

MODE_ORDER = (
    "solo-0",
    "solo-1",
    "nccl-sync",
    "nccl-cadence",
    "nccl-async",
    "cpu-sync",
    "cpu-cadence",
    "cpu-async",
    DILOCO,
)
BEST_WITHIN = 0.02  # "fastest mode whose eval is within 2 % (relative) of solo-0's"
IDLE_FLAG_PCT = 5.0
SHORT_S = 2.0
"""Training times under this many seconds are flagged: start-up, the ranks' first batches and
one scheduler hiccup move a ratio of such totals by 10 % or more."""


def _f(v: float | None, digits: int = 4) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _mode_key(r: RunRecord) -> tuple[int, str]:
    return (MODE_ORDER.index(r.mode) if r.mode in MODE_ORDER else len(MODE_ORDER), r.mode)


def _model_key(r: RunRecord) -> tuple[int, str]:
    return (MODEL_NAMES.index(r.model) if r.model in MODEL_NAMES else len(MODEL_NAMES), r.model)


def _tag(r: RunRecord) -> str:
    """The mode cell: the mode, marked when its data was synthetic."""
    return f"{r.mode} [synthetic]" if r.synthetic else r.mode


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


class _Index:
    """Records grouped by model (the README's order, whatever order they were loaded in) and
    mode."""

    def __init__(self, records: Sequence[RunRecord]) -> None:
        self.by_model: dict[str, list[RunRecord]] = {}
        for r in sorted(records, key=_model_key):
            self.by_model.setdefault(r.model, []).append(r)
        for runs in self.by_model.values():
            runs.sort(key=_mode_key)

    def get(self, model: str, mode: str) -> RunRecord | None:
        return next((r for r in self.by_model.get(model, []) if r.mode == mode), None)

    def complete(self, model: str) -> list[RunRecord]:
        return [r for r in self.by_model[model] if r.status == "complete"]


def _better(r: RunRecord, a: float, b: float) -> bool:
    return a > b if r.higher_is_better else a < b


def _delta(r: RunRecord, value: float, ref: float) -> str:
    """Eval difference: percentage points for accuracy, absolute otherwise."""
    d = value - ref
    return f"{d:+.2f} pp" if r.eval_name == "accuracy" else f"{d:+.4f}"


def _hardware(ix: _Index, records: Sequence[RunRecord]) -> list[str]:
    out = []
    seen: set[str] = set()
    for r in records:
        h = r.hardware
        line = (
            f"- host `{h.get('host', '?')}`: {h.get('cpu', '?')} ({h.get('cores', '?')} cores), "
            f"torch {h.get('torch', '?')}, GPUs: {', '.join(h.get('gpus') or []) or 'none'}"
        )
        if line not in seen:
            seen.add(line)
            out.append(line)
    devs = sorted(
        {", ".join(r.devices) + _slow(r) for r in records if not r.mode.startswith("solo")}
    )
    for d in devs:
        out.append(f"- DDP devices: {d}")
    out += [
        "",
        "Speed ratio solo-1 / solo-0 (training time of the same run on each device alone):",
        "",
    ]
    rows = []
    for model in ix.by_model:
        s0, s1 = ix.get(model, "solo-0"), ix.get(model, "solo-1")
        ratio = f"{s1.speed_s / s0.speed_s:.2f}x" if s0 and s1 and s0.speed_s else "—"
        rows.append(
            [model, _f(s0.speed_s if s0 else None, 1), _f(s1.speed_s if s1 else None, 1), ratio]
        )
    return out + _table(["Model", "solo-0 (s)", "solo-1 (s)", "Ratio"], rows)


def _slow(r: RunRecord) -> str:
    if not r.slowdown:
        return ""
    return " (" + ", ".join(f"rank {k} slowed {v:g}x" for k, v in sorted(r.slowdown.items())) + ")"


def _notes(ix: _Index, records: Sequence[RunRecord]) -> list[str]:
    out = []
    for model, runs in ix.by_model.items():
        sources = sorted({r.data_source for r in runs})
        r0 = runs[0]
        what = {
            "accuracy": "accuracy % (higher is better)",
            "val_ce": "validation cross-entropy (lower is better)",
            "mse": "test MSE (lower is better)",
        }[r0.eval_name]
        cap = f", at most {r0.batches_per_epoch} batches per epoch" if r0.batches_per_epoch else ""
        out.append(
            f"- **{model}**: eval = {what}; {r0.epochs_planned} epoch(s){cap}, batch "
            f"{r0.batch_size} per rank, {_seeds_phrase(runs)}; data: {'; '.join(sources)}"
        )
        se = _accuracy_se(runs)
        if se is not None:
            out.append(
                f"  - one standard error of a {model} accuracy over its "
                f"{r0.eval_samples:,} held-out images is ±{se:.2f} pp: gaps between single "
                "runs smaller than about twice that are within evaluation noise"
                + (
                    "; Eval Quality's gaps over several seeds carry their own standard error."
                    if len(_model_seeds(runs)) > 1
                    else "."
                )
            )
        if any(r.synthetic for r in runs):
            out.append(
                f"  - **{model} trained on SYNTHETIC data**: its numbers say nothing about "
                "the real dataset (rows are marked [synthetic])."
            )
    out.append(
        "- `Total (s)` and every speed comparison use training time: the sum of the epochs' "
        "wall times (the slowest rank's; rank 0's per-epoch evaluation falls outside it, with "
        "one device as with several); `Wall (s)` adds process start-up and evaluation. On a "
        "shared machine both are noisy. CPU runs train on one thread per rank, solo runs too"
        + (
            "; the ranks of a multi-rank CPU run are each bound to their own cores (one device "
            "alone is not: it has the machine to itself)."
            if any(r.bound_cores for r in records)
            else "."
        )
    )
    repeated = [r for r in records if r.repeat_train_s and len(r.repeat_train_s) > 1]
    if repeated:
        n = max(len(r.repeat_train_s or ()) for r in repeated)
        seeded = any(len(r.seed_evals()) > 1 for r in repeated)
        evals = (
            "evals are the mean over its seeds (Eval Quality compares each seed's run with "
            "solo-0's on the same seed: same initial weights, same data order); losses and every "
            "other column are its last run's."
            if seeded
            else "losses, evals and every other column are its last run's."
        )
        out.append(
            f"- Each cell ran up to {n} times, in rounds (every mode once per round, so a "
            "drift of the machine reaches every mode alike): `Total (s)` and the speedups use "
            f"the median training time of a cell's runs; {evals}"
        )
    if any(r.slowdown for r in records):
        out.append(
            "- A slowed rank (`--slowdown`) owes `factor` times its usual batch time (the "
            "lower quartile of its recent batches) minus what each batch took, and "
            f"sleeps it in pieces of {PAY_EVERY_S * 1000:g} ms or more, always before it talks "
            "to the other ranks: it stands in for a slower device without taking cycles from "
            "the others. The solo-1 / solo-0 ratio above is what the slowdown came to on this "
            "machine."
        )
    out.append(
        "- `vs Ref` is the eval minus the model's published target (the Models table of "
        "`ddp-bench/README.md`, reached by full-length runs on the full dataset); short runs are "
        "not expected to reach it."
    )
    short = _short(records)
    if short:
        out.append(
            f"- **Too short to time**: {len(short)} run(s) trained for less than {SHORT_S:g} s "
            f"({_short_list(short)}). Speedups from such totals mean little (start-up, the "
            "first batches and one hiccup of the machine move them by 10 % or more); they are "
            "marked *(short)*. Train longer (`--epochs`, as `cpu-2rank-long` does) or repeat "
            "(`--repeats`, `--seeds`) before reading them."
        )
    if any(r.mode == DILOCO for r in records):
        out.append(
            f"- `{DILOCO}` is cpu-async whose averagings are outer steps of flodl-ddp's "
            "`DiLoCo()` (Nesterov momentum 0.9, lr 0.7 on the averaged change). DiLoCo was made "
            "for hundreds of local steps between averagings, far more than ElChe's windows "
            "here: its rows against cpu-async's show what the outer optimizer does at this "
            "cadence."
        )
    return out


def _short(records: Sequence[RunRecord]) -> list[RunRecord]:
    """Complete runs whose training time (the median of a repeated cell) is under
    :data:`SHORT_S`."""
    return [r for r in records if r.status == "complete" and r.speed_s < SHORT_S]


def _short_list(runs: Sequence[RunRecord], most: int = 4) -> str:
    names = [f"{r.model}/{r.mode} {r.speed_s:.1f} s" for r in runs[:most]]
    return ", ".join(names) + (f" and {len(runs) - most} more" if len(runs) > most else "")


def _flag(ratio: str, *runs: RunRecord | None) -> str:
    """``ratio`` marked *(short)* when a run it divides trained under :data:`SHORT_S`."""
    short = any(r is not None and r.speed_s < SHORT_S for r in runs)
    return f"{ratio} *(short)*" if short else ratio


def _model_seeds(runs: Sequence[RunRecord]) -> list[int]:
    """Every seed a model's runs trained on."""
    return sorted({s for r in runs for s in (r.repeat_seeds or [r.seed])})


def _seeds_phrase(runs: Sequence[RunRecord]) -> str:
    seeds = _model_seeds(runs)
    return f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {_seed_span(seeds)}"


def _accuracy_se(runs: Sequence[RunRecord]) -> float | None:
    """The binomial standard error (pp) of solo-0's final accuracy, or of the first run's."""
    r0 = next((r for r in runs if r.mode == "solo-0"), runs[0])
    acc = r0.final_eval
    if r0.eval_name != "accuracy" or not r0.eval_samples or acc is None:
        return None
    p = min(max(acc / 100.0, 0.0), 1.0)
    return 100.0 * math.sqrt(p * (1.0 - p) / r0.eval_samples)


def _incomplete(records: Sequence[RunRecord]) -> list[str]:
    bad = [r for r in records if r.status != "complete"]
    if not bad:
        return ["None: every run finished."]
    return [
        f"- {r.model} / {_tag(r)}: {r.status} after {len(r.epochs)} of {r.epochs_planned} "
        f"epoch(s): {r.error or 'no error recorded'}"
        for r in bad
    ]


def _results(ix: _Index) -> list[str]:
    out: list[str] = []
    for model, runs in ix.by_model.items():
        world = max(len(r.devices) for r in runs)
        head = ["Mode", "Loss", "Eval", "vs Ref", "Total (s)", "Wall (s)", "Syncs", "Avg Sync (ms)"]
        head += [f"R{i} busy" for i in range(world)] + ["Idle (s)"]
        rows = []
        for r in runs:
            ev = r.eval_mean
            ref = _delta(r, ev, r.target) if ev is not None and r.target is not None else "—"
            busy = [
                f"{r.ranks[i].busy_pct:.0f}%" if i < len(r.ranks) else "—" for i in range(world)
            ]
            idle = sum(rt.idle_s for rt in r.ranks) if r.ranks else None
            solo = is_solo(r.mode)  # one device alone averages nothing: no syncs to show
            rows.append(
                [
                    _tag(r),
                    _f(r.final_loss),
                    _f(ev),
                    ref,
                    _f(r.speed_s, 1),
                    _f(r.total_s, 1),
                    str(r.syncs) if r.syncs is not None and not solo else "—",
                    _f(None if solo else r.avg_sync_ms, 1),
                    *busy,
                    _f(idle, 1),
                ]
            )
        out += [f"### {model}", "", *_table(head, rows), ""]
    return out[:-1] if out else ["No runs."]


def _best(ix: _Index) -> list[str]:
    rows = []
    for model in ix.by_model:
        done = [r for r in ix.complete(model) if r.eval_mean is not None]
        if not done:
            rows.append([model, "—", "—"])
            continue
        best = done[0]
        for r in done[1:]:
            if _better(r, r.eval_mean, best.eval_mean):  # type: ignore[arg-type]
                best = r
        solo = ix.get(model, "solo-0")
        fastest = "— (no solo-0)"
        if solo is not None and solo.eval_mean is not None:
            ref = solo.eval_mean
            ok = [
                r
                for r in done
                if (
                    r.eval_mean >= ref * (1 - BEST_WITHIN)
                    if r.higher_is_better
                    else r.eval_mean <= ref * (1 + BEST_WITHIN)
                )
            ]
            f = min(ok, key=lambda r: r.speed_s)
            fastest = f"{_tag(f)} ({f.speed_s:.1f} s, eval {f.eval_mean:.4f})"
        rows.append([model, f"{_tag(best)} ({best.eval_mean:.4f})", fastest])
    return _table(["Model", "Best eval", "Fastest within 2% of solo-0's eval"], rows)


def _vs_solo(
    ix: _Index, cell: Callable[[RunRecord, RunRecord], list[str]], head: list[str]
) -> list[str]:
    rows = []
    for model in ix.by_model:
        solo = ix.get(model, "solo-0")
        for r in ix.by_model[model]:
            if r.mode == "solo-0":
                continue
            rows.append([model, _tag(r), *(cell(r, solo) if solo else ["—"] * (len(head) - 2))])
    return _table(head, rows) if rows else ["No runs besides solo-0."]


def _eval_cells(r: RunRecord, solo: RunRecord) -> list[str]:
    """Eval, solo-0's and the gap; over the seeds both cells ran on when there are several
    (the gap's mean over seeds ± its standard error: each seed compares runs that started from
    the same weights and drew the same per-epoch data order), else the two last runs'."""
    mine, theirs = r.seed_evals(), solo.seed_evals()
    common = sorted(set(mine) & set(theirs))
    if len(common) < 2:
        a, b = r.final_eval, solo.final_eval
        seeds = str(common[0]) if common and a is not None and b is not None else "—"
        if a is None or b is None:
            return [_f(a), _f(b), "—", seeds]
        return [_f(a), _f(b), _delta(r, a, b), seeds]
    gaps = [mine[s] - theirs[s] for s in common]
    mean = statistics.fmean(gaps)
    se = statistics.stdev(gaps) / math.sqrt(len(gaps))
    unit = (" pp", 2) if r.eval_name == "accuracy" else ("", 4)
    gap = f"{mean:+.{unit[1]}f} ± {se:.{unit[1]}f}{unit[0]}"
    a = statistics.fmean(mine[s] for s in common)
    b = statistics.fmean(theirs[s] for s in common)
    return [_f(a), _f(b), gap, f"{len(common)} ({_seed_span(common)})"]


def _seed_span(seeds: Sequence[int]) -> str:
    """``42–46`` for consecutive seeds, else the list."""
    ordered = sorted(seeds)
    if ordered == list(range(ordered[0], ordered[0] + len(ordered))):
        return f"{ordered[0]}–{ordered[-1]}"
    return ", ".join(map(str, ordered))


def _loss_cells(r: RunRecord, solo: RunRecord) -> list[str]:
    a, b = r.final_loss, solo.final_loss
    ratio = f"{a / b:.3f}" if a is not None and b else "—"
    return [_f(a), _f(b), ratio]


def _speed_cells(r: RunRecord, solo: RunRecord) -> list[str]:
    ratio = _flag(f"{solo.speed_s / r.speed_s:.2f}x", r, solo) if r.speed_s else "—"
    return [_f(r.speed_s, 1), _f(solo.speed_s, 1), ratio, _spread(r), _spread(solo)]


def _speed(r: RunRecord, rank: int) -> float | None:
    """Median over the epochs of rank ``rank``'s speed in run ``r``: its samples over its compute
    time (forward, backward, optimizer step, the slowdown's pauses), not over the epoch's wall
    time, which would count the engine's waiting and averaging as the device's."""
    xs = [
        e.rank_speed[rank]
        for e in r.epochs
        if e.rank_speed and len(e.rank_speed) > rank and e.rank_speed[rank] > 0
    ]
    return statistics.median(xs) if xs else None


def breakdown(
    r: RunRecord, solo0: RunRecord, solo1: RunRecord
) -> tuple[float, float, float, float] | None:
    """A two-rank run's ``(speedup, pair alone, ranks together, engine)`` against the two devices
    alone, ``speedup = pair alone x ranks together x engine`` (see :func:`_breakdown`'s text);
    ``None`` when a run lacks the ranks' compute speeds or is not a two-rank run."""
    alone = [_speed(solo0, 0), _speed(solo1, 0)]
    ranks = [_speed(r, k) for k in range(2)]
    if len(r.devices) != 2 or None in alone or None in ranks or not r.train_s:
        return None
    v0, v1 = alone  # type: ignore[misc]
    speedup = solo0.train_s / r.train_s
    pair = (v0 + v1) / v0
    together = sum(ranks) / (v0 + v1)  # type: ignore[arg-type]
    return speedup, pair, together, speedup / (pair * together)


def _breakdown(ix: _Index) -> list[str]:
    """Each two-rank run's speedup over solo-0 as the product of three factors (see the
    section's text)."""
    rows = []
    for model, runs in ix.by_model.items():
        solo0, solo1 = ix.get(model, "solo-0"), ix.get(model, "solo-1")
        if solo0 is None or solo1 is None:
            continue
        for r in runs:
            parts = breakdown(r, solo0, solo1)  # None for solo runs: one device
            if parts is None:
                continue
            speedup, pair, together, engine = parts
            rows.append(
                [
                    model,
                    _tag(r),
                    _flag(f"{speedup:.2f}x", r, solo0),
                    f"{pair:.2f}x",
                    f"{together:.2f}",
                    f"{engine:.2f}",
                ]
            )
    if not rows:
        return [
            "Needs a two-rank run with solo-0 and solo-1 of the same model, with each rank's "
            "compute speed per epoch (records written before ddp-bench kept it have none)."
        ]
    return [
        "Where a two-rank run's speedup comes from, from each cell's last run: speedup = "
        "*pair alone* x *ranks together* x *engine*. **Pair alone** is what the two devices "
        "could give at their solo speeds (1 + solo-1's speed / solo-0's: the ideal). **Ranks "
        "together** is the speed each rank measured in the run (its samples over its compute "
        "time, the slowdown included), summed, over the same sum alone: below 1 when the ranks "
        "slow each other down (sharing cores, caches or memory bandwidth) or, in sync modes, "
        "wait inside backward. **Engine** is the rest: the share of the ranks' speed the run "
        "turned into training (waiting, averaging, epoch boundaries), relative to the share "
        "solo-0 turns of its own speed (1.00 = as efficient as one device alone).",
        "",
        *_table(["Model", "Mode", "Speedup", "Pair alone", "Ranks together", "Engine"], rows),
    ]


def _count(records: Sequence[RunRecord]) -> str:
    """``N run(s)``, or ``N cells, M runs`` when cells were repeated."""
    runs = sum(max(1, len(r.repeat_train_s or ())) for r in records)
    if runs == len(records):
        return f"{runs} run(s)"
    return f"{len(records)} cells, {runs} runs"


def _spread(r: RunRecord) -> str:
    """``lo–hi`` of a repeated cell's training times, ``—`` for a single run."""
    t = r.repeat_train_s
    if not t or len(t) < 2:
        return "—"
    return f"{min(t):.2f}–{max(t):.2f} ({len(t)} runs)"


def _trajectory(ix: _Index) -> list[str]:
    out: list[str] = []
    for model, runs in ix.by_model.items():
        n = max((len(r.epochs) for r in runs), default=0)
        head = ["Mode", *(f"ep {i + 1}" for i in range(n))]
        rows = [
            [_tag(r), *(_f(r.epochs[i].loss) if i < len(r.epochs) else "—" for i in range(n))]
            for r in runs
        ]
        out += [f"### {model}", "", *_table(head, rows), ""]
    return out[:-1] if out else ["No runs."]


def _vram(records: Sequence[RunRecord]) -> list[str]:
    gpu = [r for r in records if any(d.startswith("cuda") for d in r.devices)]
    if not gpu:
        return ["No CUDA device in these runs: nothing to measure (CPU ranks)."]
    rows = [[r.model, _tag(r), _peaks(r)] for r in gpu]
    return [
        "The most memory each rank's tensors held on its device during the run "
        "(`torch.cuda.max_memory_allocated`: the replica, its gradients, the optimizer's state, "
        "activations and resident data; the caching allocator reserves more).",
        "",
        *_table(["Model", "Mode", "Peak VRAM per rank"], rows),
    ]


def _peaks(r: RunRecord) -> str:
    if r.peak_memory is None or len(r.peak_memory) != len(r.devices):
        return "not recorded"
    return ", ".join(
        f"{d}: {v / 2**20:.1f} MiB" if d.startswith("cuda") else f"{d}: —"
        for d, v in zip(r.devices, r.peak_memory, strict=True)
    )


def _idle(records: Sequence[RunRecord]) -> list[str]:
    rows = []
    for r in records:
        for rt in r.ranks:
            flag = "idle" if rt.idle_pct > IDLE_FLAG_PCT else ""
            rows.append(
                [
                    r.model,
                    _tag(r),
                    str(rt.rank),
                    _f(rt.wall_s, 1),
                    _f(rt.idle_s, 2),
                    f"{rt.idle_pct:.1f}%",
                    flag,
                ]
            )
    if not rows:
        return ["No timeline was recorded."]
    return [
        f"Ranks idle more than {IDLE_FLAG_PCT:.0f}% of the run are flagged.",
        "",
        *_table(["Model", "Mode", "Rank", "Wall (s)", "Idle (s)", "Idle %", "Flag"], rows),
    ]


def _idle_causes(records: Sequence[RunRecord]) -> list[str]:
    causes = ("sync_wait", "epoch_boundary", "other", "untracked")
    rows = []
    for r in records:
        for rt in r.ranks:
            if rt.idle_s > 0:
                rows.append(
                    [
                        r.model,
                        _tag(r),
                        str(rt.rank),
                        *(_f(rt.idle_causes.get(c, 0.0), 2) for c in causes),
                    ]
                )
    if not rows:
        return ["No idle time was recorded."]
    return [
        "Seconds idle, by what the rank was waiting for: `sync_wait` = slower ranks at an "
        "averaging, `epoch_boundary` = the end or start of an epoch, `untracked` = time no "
        "timeline span covers.",
        "",
        *_table(["Model", "Mode", "Rank", *causes], rows),
    ]


def _elche(records: Sequence[RunRecord]) -> list[str]:
    rows = []
    for r in records:
        if is_solo(r.mode):  # no ElChe without a second rank (older records carry its numbers)
            continue
        anchors = [e.anchor for e in r.epochs if e.anchor is not None]
        shares = r.epochs[-1].batch_share if r.epochs else None
        speed = r.epochs[-1].rank_speed if r.epochs else None
        if not anchors and not shares:
            continue
        ok = speed and len(speed) > 1 and min(speed) > 0
        ratio = f"{max(speed) / min(speed):.2f}" if ok else "—"  # type: ignore[arg-type]
        rows.append(
            [
                r.model,
                _tag(r),
                " → ".join(map(str, anchors)) or "—",
                " / ".join(f"{s:.2f}" for s in shares or []) or "—",
                ratio,
                str(r.anchor_changes) if r.anchor_changes is not None else "—",
            ]
        )
    if not rows:
        return ["No DDP run recorded ElChe telemetry."]
    return [
        "Anchor per epoch, last epoch's batch share per rank, the ranks' speed ratio fast/slow "
        "in that epoch (samples over compute time) and anchor changes (timeline).",
        "",
        *_table(["Model", "Mode", "Anchor", "Batch share", "Speed ratio", "Anchor changes"], rows),
    ]


def _streaming(records: Sequence[RunRecord]) -> list[str]:
    rows = []
    for r in records:
        for rt in r.ranks:
            if rt.compute_s > 0:
                rows.append(
                    [
                        r.model,
                        _tag(r),
                        str(rt.rank),
                        _f(rt.data_s, 2),
                        f"{100 * rt.data_s / rt.compute_s:.1f}%",
                    ]
                )
    if not rows:
        return ["No timeline was recorded."]
    return [
        "Time each rank spent waiting for its next batch outside compute (data spans), and "
        "its share of compute time: near 0 means loading overlapped the epoch.",
        "",
        *_table(["Model", "Mode", "Rank", "Data wait (s)", "vs compute"], rows),
    ]


def render(records: Sequence[RunRecord], *, title: str = "ddp-bench report") -> str:
    """The Markdown report of ``records`` (every section present, even when empty)."""
    ix = _Index(records)
    ordered = [r for runs in ix.by_model.values() for r in runs]
    body: dict[str, list[str]] = {
        "Hardware": _hardware(ix, ordered),
        "Notes": _notes(ix, ordered),
        "Incomplete Runs": _incomplete(ordered),
        "Per-Model Results": _results(ix),
        "Best Mode per Model": _best(ix),
        "Eval Quality vs solo-0": _vs_solo(
            ix, _eval_cells, ["Model", "Mode", "Eval", "solo-0", "Δ", "Seeds"]
        ),
        "Convergence Quality vs solo-0": _vs_solo(
            ix, _loss_cells, ["Model", "Mode", "Final loss", "solo-0", "Ratio"]
        ),
        "Per-Epoch Loss Trajectory": _trajectory(ix),
        "Speedup vs solo-0": _vs_solo(
            ix,
            _speed_cells,
            [
                "Model",
                "Mode",
                "Total (s)",
                "solo-0 (s)",
                "Speedup",
                "Mode runs (s)",
                "solo-0 runs (s)",
            ],
        ),
        "Speedup Breakdown": _breakdown(ix),
        "VRAM Usage": _vram(ordered),
        "Idle Analysis": _idle(ordered),
        "Idle Breakdown by Cause": _idle_causes(ordered),
        "ElChe Calibration": _elche(ordered),
        "Streaming Epoch Overlap": _streaming(ordered),
    }
    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    lines = [
        f"# {title}",
        "",
        f"{_count(records)}, generated {when} by `python -m ddp_bench`.",
        "",
    ]
    for name in SECTIONS:
        lines += [f"## {name}", "", *body[name], ""]
    return "\n".join(lines).rstrip() + "\n"
