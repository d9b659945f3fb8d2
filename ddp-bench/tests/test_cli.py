"""The command line: presets, explicit options winning, and every bad argument exiting 2 with the
usage, the error and a hint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ddp_bench._cells import BENCH_MODES, DILOCO
from ddp_bench._cli import list_text, parse
from ddp_bench._config import BENCH_ROOT, PRESETS
from ddp_bench._main import execute
from flodl_ddp import MODES


def cfg(*argv: str):
    return parse(list(argv), detect=False)


def test_defaults_are_every_model_in_every_mode() -> None:
    c = cfg()
    assert len(c.models) == 8 and c.modes == ("solo-0", "solo-1", *MODES, DILOCO)
    assert (*MODES, "cpu-async-diloco") == BENCH_MODES
    assert (c.seed, c.tolerance, c.output, c.devices) == (42, 0.15, Path("runs"), ("cpu", "cpu"))
    assert c.train and c.report is None


def test_quick_preset_and_overrides() -> None:
    c = cfg("quick")
    assert c.models == ("mlp",) and c.epochs == 2 and c.batches == 100
    assert c.slowdown == {1: 2.0} and c.report == str(Path("runs") / "report.md")
    c = cfg("quick", "--epochs", "1", "--output", "out", "--mode", "cpu_async,solo-0")
    assert c.epochs == 1 and c.modes == ("cpu-async", "solo-0") and c.report == "out/report.md"


def test_slowdown_of_one_undoes_the_presets() -> None:
    assert cfg("quick", "--slowdown", "1=1").slowdown == {}
    assert cfg("quick", "--slowdown", "1=1.5").slowdown == {1: 1.5}
    assert cfg("--slowdown", "0=3", "--slowdown", "1=1").slowdown == {0: 3.0}


def test_cpu_2rank_preset_writes_into_the_bench_folder() -> None:
    c = cfg("cpu-2rank")
    assert c.models == ("logistic", "mlp", "lenet")
    assert c.modes == ("solo-0", "solo-1", *MODES)  # its committed report's cells: no DiLoCo
    assert c.report.endswith("ddp-bench/reports/cpu-2rank.md") and c.slowdown == {1: 2.0}
    assert c.seeds == 5 and c.repeats == 1 and cfg().seeds == 1 and cfg().repeats == 1
    assert cfg("cpu-2rank", "--repeats", "5").repeats == 5
    assert cfg("cpu-2rank", "--seeds", "2", "--seed", "7").seeds == 2


def test_cpu_2rank_long_preset_is_cpu_2rank_at_30_epochs() -> None:
    short, long = cfg("cpu-2rank"), cfg("cpu-2rank-long")
    assert short.epochs is None and long.epochs == 30
    assert long.report.endswith("ddp-bench/reports/cpu-2rank-long.md")
    assert long.output == Path("runs/cpu-2rank-long") and short.output == Path("runs/cpu-2rank")
    assert long.with_(epochs=None, output=short.output, report=short.report) == short.with_(
        preset="cpu-2rank-long"
    )


def test_diloco_cell_is_a_mode() -> None:
    assert cfg("--mode", "cpu_async_diloco,CPU-Async").modes == (DILOCO, "cpu-async")
    assert DILOCO in cfg("--mode", "all").modes and DILOCO in list_text()


def test_validate_preset_uses_the_committed_baseline() -> None:
    c = cfg("validate")
    assert c.validate and not c.save_baseline and not c.sweep_factors
    assert c.baseline == BENCH_ROOT / "baselines" / "cpu-validate.json" and c.baseline.is_file()
    assert c.models == ("logistic", "mlp", "lenet") and c.seeds == 3
    assert c.modes == ("solo-0", "solo-1", *BENCH_MODES) and c.slowdown == {1: 2.0}
    # an explicit --save-baseline turns the preset's check into re-creating the baseline
    again = cfg("validate", "--save-baseline")
    assert again.save_baseline and not again.validate and again.baseline == c.baseline
    assert cfg("validate", "--baseline", "mine.json").baseline == Path("mine.json")


def test_hetero_sweep_preset_and_slow_factors() -> None:
    c = cfg("hetero-sweep")
    assert c.sweep_factors == (1.0, 2.0, 4.0, 8.0, 16.0) and c.slowdown == {}
    assert c.models == ("mlp", "lenet") and c.epochs == 40
    assert c.modes == ("solo-0", "solo-1", "cpu-cadence", "cpu-async")
    assert cfg("hetero-sweep", "--slow-factors", "3,1.5").sweep_factors == (3.0, 1.5)
    assert cfg("--slow-factors", "2").sweep_factors == (2.0,) and cfg().sweep_factors == ()
    # an explicit slowdown ends the preset's sweep
    plain = cfg("hetero-sweep", "--slowdown", "1=3")
    assert plain.sweep_factors == () and plain.slowdown == {1: 3.0}
    # saved sweep runs can be reported again without training
    assert not cfg("--slow-factors", "1,2", "--report").train


def test_report_alone_uses_saved_runs() -> None:
    assert not cfg("--report").train and cfg("--report", "-").report == "-"
    assert not cfg("report").train
    assert cfg("--model", "mlp", "--report").train


def test_one_device_gives_solo_only() -> None:
    assert cfg("--devices", "cpu").modes == ("solo-0",)


@pytest.mark.parametrize(
    ("argv", "message", "hint"),
    [
        (["--model", "vgg"], "unknown model 'vgg'", "--list"),
        (["--mode", "ring-allreduce"], "unknown mode 'ring-allreduce'", "--list"),
        (["--mode", "solo-2"], "'solo-2' names no device", "solo-N runs device N"),
        (
            ["--devices", "cpu", "--mode", "cpu-sync"],
            "needs at least 2 devices",
            "--devices cpu,cpu",
        ),
        (["--devices", "tpu:0"], "'tpu:0' is not a device", "cuda:N"),
        (["--epochs", "0"], "--epochs: 0 is below 1", "whole number"),
        (["--batches", "ten"], "'ten' is not an integer", "whole number"),
        (["--lr-scale", "-1"], "--lr-scale: -1.0 is out of range", "number > 0"),
        (["--tolerance", "2"], "--tolerance: 2.0 is out of range", "(0.0, 1.0)"),
        (["--repeats", "0"], "--repeats: 0 is below 1", "whole number"),
        (["--seeds", "-3"], "--seeds: -3 is below 1", "whole number"),
        (["--slowdown", "1:2"], "is not RANK=FACTOR", "--slowdown 1=2"),
        (["--slowdown", "5=2"], "rank 5 does not exist", "--slowdown 1=2"),
        (["--slowdown", "1=0.5"], "factor 0.5 is below 1", "--slowdown 1=2"),
        (["--monitor", "70000"], "port 70000 is above 65535", "1..65535"),
        (["--validate", "--save-baseline"], "exclude each other", "save a baseline once"),
        (["warp-speed"], "unknown preset 'warp-speed'", "--list"),
        (["--slow-factors", "0.5"], "0.5 is below 1", "--slow-factors 1,2,4,8,16"),
        (["--slow-factors", "2,2"], "2 is given twice", "--slow-factors 1,2,4,8,16"),
        (["--slow-factors", ","], "names no factor", "--slow-factors 1,2,4,8,16"),
        (["--slow-factors", "2", "--slowdown", "1=2"], "exclude each other", "--slow-factors"),
        (["--devices", "cpu", "--slow-factors", "2"], "second of two devices", "cpu,cpu"),
        (["hetero-sweep", "--validate"], "not checked against a baseline", "validate preset"),
        (["--frobnicate"], "unrecognized arguments", "--help"),
    ],
)
def test_bad_arguments_exit_2_with_usage_and_hint(
    argv: list[str], message: str, hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        cfg(*argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: python -m ddp_bench")
    assert message in err
    hint_lines = [line for line in err.splitlines() if line.startswith("hint: ")]
    assert len(hint_lines) == 1 and hint in hint_lines[0]


def test_cuda_devices_the_machine_lacks_are_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    with pytest.raises(SystemExit) as info:
        parse(["--devices", "cuda:0,cpu", "--mode", "cpu-cadence"], detect=True)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--devices: devices ['cuda:0', 'cpu'] name cuda:0" in err and "without CUDA" in err
    assert "hint: python -m ddp_bench --devices cpu,cpu" in err


def test_list_names_every_preset_with_its_help() -> None:
    text = list_text().split("presets:\n", 1)[1]
    rows = [line.split(maxsplit=1) for line in text.splitlines()]
    assert [name for name, _ in rows] == list(PRESETS)
    assert all(help_text.strip() for _, help_text in rows)
    # one column: every help text starts at the same offset
    assert len({line.index(h) for line, (_, h) in zip(text.splitlines(), rows, strict=True)}) == 1


def test_module_entry_point(tmp_path: Path) -> None:
    ok = subprocess.run([sys.executable, "-m", "ddp_bench", "--list"], capture_output=True,
                        text=True, timeout=120, check=False, cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0 and "resnet-graph" in ok.stdout and "cpu-2rank" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "ddp_bench", "--epochs", "x"], capture_output=True,
                         text=True, timeout=120, check=False, cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2 and "usage:" in bad.stderr and "hint:" in bad.stderr


def test_an_output_it_cannot_create_is_refused_before_training(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "runs"
    c = cfg("--output", str(out), "--model", "logistic", "--mode", "solo-0", "--epochs", "1")
    assert c.train and execute(c) == 2
    err = capsys.readouterr().err
    assert f"--output {out}: cannot create it" in err and "hint:" in err
