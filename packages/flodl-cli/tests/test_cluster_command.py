"""``fdl @cluster WORDS``: an fdl.yml command is resolved as ``fdl WORDS`` would run it; other
words run literally."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from flodl_cli import main
from flodl_cli._cluster_command import resolve
from flodl_cli._errors import UsageError

MANIFEST = """\
entry: python train.py
options: {epochs: 3}
commands:
  train: {run: python train.py, append: --out runs/x}
  quick: {options: {epochs: 1}, training: {lr: 0.5}}
  piped: {run: "python train.py && echo done"}
  bench: {path: benchmarks}
"""
BENCH = """\
entry: python bench.py
commands:
  fast: {run: python bench.py --fast}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "fdl.yml").write_text(MANIFEST)
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "fdl.yml").write_text(BENCH)
    return tmp_path


def test_run_command_with_arguments_and_append(project: Path) -> None:
    job = resolve(["train", "--", "--epochs", "2", "--name", "a b"], project)
    assert job.argv == ["python", "train.py", "--epochs", "2", "--name", "a b", "--out", "runs/x"]
    assert job.command == "train" and job.env == {}
    assert job.line == "python train.py --epochs 2 --name 'a b' --out runs/x"


def test_preset_runs_the_entry_with_its_options_and_config(project: Path) -> None:
    job = resolve(["quick"], project)
    assert job.argv == ["python", "train.py", "--epochs", "1"]
    assert json.loads(job.env["FDL_CONFIG"]) == {"training": {"lr": 0.5}}


def test_shell_lines_and_sub_folders_go_through_sh(project: Path) -> None:
    assert resolve(["piped"], project).argv == ["sh", "-c", "python train.py && echo done"]
    fast = resolve(["bench", "fast", "--", "--n", "2"], project)
    assert fast.argv == ["sh", "-c", "cd benchmarks && python bench.py --fast --n 2"]
    assert fast.command == "bench fast"
    entry = resolve(["bench"], project)  # the sub-manifest's entry
    assert entry.argv == ["sh", "-c", "cd benchmarks && python bench.py"]


def test_other_words_run_literally(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert resolve(["python", "train.py", "train"], project).argv == ["python", "train.py", "train"]
    bare = tmp_path_factory.mktemp("no-manifest")
    assert resolve(["train"], bare).argv == ["train"]  # no fdl.yml: a program named train


def test_mistakes_are_usage_errors(project: Path) -> None:
    with pytest.raises(UsageError, match="arguments for 'train' go after '--'"):
        resolve(["train", "--epochs", "2"], project)
    with pytest.raises(UsageError, match=r"'bench' has no command 'slow' \(commands: fast\)"):
        resolve(["bench", "slow"], project)


def test_dry_run_shows_the_resolved_command(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "fdl.cluster.yml").write_text(
        "cluster:\n  controller: {host: 127.0.0.1}\n  workers: [{host: a, ssh: me@a}]\n"
    )
    monkeypatch.chdir(project)
    assert main(["@cluster", "--dry-run", "quick", "--", "--seed", "4"]) == 0
    line = capsys.readouterr().out.strip()
    remote = shlex.split(shlex.split(line)[-1])  # the line the worker's shell runs
    assert remote[remote.index("--") + 1 :] == [
        "python",
        "train.py",
        "--epochs",
        "1",
        "--seed",
        "4",
    ]
    assert 'FDL_CONFIG={"training": {"lr": 0.5}}' in remote


def test_a_cluster_file_found_above_is_named(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    f = project / "fdl.cluster.yml"
    f.write_text("cluster:\n  controller: {host: 127.0.0.1}\n  workers: [{host: a}]\n")
    monkeypatch.chdir(project / "benchmarks")
    assert main(["@cluster", "--dry-run", "python", "x.py"]) == 0
    err = capsys.readouterr().err
    assert f"fdl @cluster: using {f} (found in a parent folder of {project / 'benchmarks'})" in err
    monkeypatch.chdir(project)
    assert main(["@cluster", "--dry-run", "python", "x.py"]) == 0
    assert "using" not in capsys.readouterr().err  # found here: nothing to point out
