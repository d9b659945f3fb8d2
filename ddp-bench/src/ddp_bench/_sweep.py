"""The report of a slow-factor sweep (``--slow-factors``, the ``hetero-sweep`` preset): per model
and factor F, each multi-rank mode's speedup over solo-0 against the ideal ``1 + 1/F``.

A rank F times slower than the fast one adds ``1/F`` of it, so two ranks can at best train
``1 + 1/F`` times as fast as the fast one alone (F = 1: equal ranks, 2.0). Every factor's runs
sit in their own folder (``<output>/slow-<F>/``, with that factor's full report); speedups
compare runs of the same factor only.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from ._cells import is_solo
from ._record import RunRecord
from ._report import MODE_ORDER, SHORT_S, _delta, _f, _flag, _model_key, _table, breakdown

TITLE = "ddp-bench slow-factor sweep"


def point_folder(factor: float) -> str:
    """The folder of one factor's runs: ``slow-2``, ``slow-1.5``."""
    return f"slow-{factor:g}"


def ideal(factor: float) -> float:
    """``1 + 1/factor``: two ranks' best speedup over the faster alone."""
    return 1.0 + 1.0 / factor


def _modes(records: Sequence[RunRecord]) -> list[str]:
    found = {r.mode for r in records if not is_solo(r.mode)}
    return sorted(found, key=lambda m: (MODE_ORDER.index(m) if m in MODE_ORDER else 99, m))


def _cell(runs: dict[str, RunRecord], mode: str) -> RunRecord | None:
    r = runs.get(mode)
    return r if r is not None and r.status == "complete" else None


def _speed_rows(factors: dict[float, dict[str, RunRecord]], modes: list[str]) -> list[list[str]]:
    rows = []
    for f, runs in sorted(factors.items()):
        solo0, solo1 = _cell(runs, "solo-0"), _cell(runs, "solo-1")
        pair = f"{1 + solo0.speed_s / solo1.speed_s:.2f}x" if solo0 and solo1 else "—"
        row = [f"{f:g}", f"{ideal(f):.2f}x", pair]
        for mode in modes:
            r = _cell(runs, mode)
            if r is None or solo0 is None or not r.speed_s:
                row += ["—", "—"]
                continue
            speedup = solo0.speed_s / r.speed_s
            row += [_flag(f"{speedup:.2f}x", r, solo0), f"{speedup / ideal(f):.0%}"]
        rows.append([*row, _f(solo0.speed_s if solo0 else None, 1)])
    return rows


def _eval_rows(factors: dict[float, dict[str, RunRecord]], modes: list[str]) -> list[list[str]]:
    rows = []
    for f, runs in sorted(factors.items()):
        solo0 = _cell(runs, "solo-0")
        ref = solo0.eval_mean if solo0 else None
        row = [f"{f:g}", _f(ref)]
        for mode in modes:
            r = _cell(runs, mode)
            ev = r.eval_mean if r else None
            row.append(_delta(r, ev, ref) if r and ev is not None and ref is not None else "—")
        rows.append(row)
    return rows


def _parts_rows(factors: dict[float, dict[str, RunRecord]], modes: list[str]) -> list[list[str]]:
    rows = []
    for f, runs in sorted(factors.items()):
        solo0, solo1 = _cell(runs, "solo-0"), _cell(runs, "solo-1")
        row = [f"{f:g}"]
        for mode in modes:
            r = _cell(runs, mode)
            parts = breakdown(r, solo0, solo1) if r and solo0 and solo1 else None
            row += [f"{parts[2]:.2f}", f"{parts[3]:.2f}"] if parts else ["—", "—"]
        rows.append(row)
    return rows


def _by_model(records: Sequence[RunRecord]) -> dict[str, dict[float, dict[str, RunRecord]]]:
    out: dict[str, dict[float, dict[str, RunRecord]]] = {}
    for r in sorted(records, key=_model_key):
        if r.slow_factor is not None:
            out.setdefault(r.model, {}).setdefault(r.slow_factor, {})[r.mode] = r
    return out


def _intro(records: Sequence[RunRecord], factors: list[float]) -> list[str]:
    hw = records[0].hardware if records else {}
    epochs = sorted({r.epochs_planned for r in records})
    lines = [
        f"{len(records)} cell(s) at slow factor(s) {', '.join(f'{f:g}' for f in factors)}, "
        f"generated {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} by "
        "`python -m ddp_bench`; host "
        f"`{hw.get('host', '?')}`: {hw.get('cpu', '?')} ({hw.get('cores', '?')} cores); "
        "devices "
        f"{'; '.join(sorted({', '.join(r.devices) for r in records if not is_solo(r.mode)}))}; "
        f"{'/'.join(map(str, epochs))} epoch(s).",
        "",
        "At slow factor F the second device is slowed F times (`--slowdown 1=F`; 1: equal "
        "devices). It adds 1/F of the fast device, so the pair's **ideal** speedup over "
        "solo-0 is 1 + 1/F. **Pair alone** is that ideal as measured: 1 + solo-0's training "
        "time over solo-1's (the slowed device alone). Each mode's **speedup** is solo-0's "
        "training time over the mode's at the same factor (medians when cells ran several "
        "times); **of ideal** is the speedup over 1 + 1/F. **Δ eval** is the mode's eval minus "
        "solo-0's at the same factor. A run's speedup is the product of three factors (from "
        "each cell's last run): pair alone (from the devices' compute speeds), **ranks "
        "together** (the ranks' own speeds in the run over alone: how much the devices slowed "
        "each other, which is the machine's) and **engine** (the share of those speeds the run "
        "turned into training, against solo-0's share of its own: what flodl-ddp controls, and "
        "what the machine's drift moves least). Each factor's full report (timelines, idle "
        "time) is "
        "`slow-<F>/report.md` beside this one.",
    ]
    if any(r.bound_cores for r in records):
        lines += ["", "The ranks of every multi-rank run were bound to their own cores."]
    short = [r for r in records if r.status == "complete" and r.speed_s < SHORT_S]
    if short:
        lines += [
            "",
            f"**Too short to time**: {len(short)} run(s) trained for less than {SHORT_S:g} s; "
            "speedups from them are marked *(short)* and mean little (train longer with "
            "`--epochs`).",
        ]
    bad = [r for r in records if r.status != "complete"]
    if bad:
        lines += ["", "**Incomplete runs** (left out of the tables):", ""]
        lines += [f"- {r.model} / {r.mode} at F={r.slow_factor:g}: {r.error}" for r in bad]
    return lines


def render_sweep(records: Sequence[RunRecord], *, title: str = TITLE) -> str:
    """The Markdown report of a sweep's records (those without a slow factor are left out)."""
    swept = [r for r in records if r.slow_factor is not None]
    factors = sorted({r.slow_factor for r in swept if r.slow_factor is not None})
    lines = [f"# {title}", "", *_intro(swept, factors), ""]
    modes = _modes(swept)
    for model, per_factor in _by_model(swept).items():
        head = ["Factor", "Ideal", "Pair alone"]
        for m in modes:
            head += [m, "of ideal"]
        lines += [f"## {model}", "", *_table([*head, "solo-0 (s)"], _speed_rows(per_factor, modes))]
        lines += ["", "Ranks together and engine (the speedup's other two factors):", ""]
        head = ["Factor"]
        for m in modes:
            head += [f"{m} together", f"{m} engine"]
        lines += _table(head, _parts_rows(per_factor, modes))
        lines += ["", "Δ eval vs solo-0:", ""]
        lines += _table(["Factor", "solo-0", *modes], _eval_rows(per_factor, modes))
        lines.append("")
    if not swept:
        lines += ["No run of a slow-factor sweep.", ""]
    return "\n".join(lines).rstrip() + "\n"
