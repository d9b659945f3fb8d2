"""fdl init: the scaffold runs: its own tests pass and one epoch of `fdl train` trains."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from flodl_cli import _wheelhouse as wh
from flodl_cli._cmd_init import render
from flodl_cli._errors import CliError
from flodl_cli._torch_install import TORCH_VERSION

from .conftest import Fdl

pytest.importorskip("flodl_graph")
pytest.importorskip("flodl_monitor")


@pytest.mark.slow
def test_scaffold_tests_and_one_epoch(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("init", "demo", "--no-wheels", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proj = tmp_path / "demo"
    for rel in (
        "train.py",
        "tests/test_train.py",
        "fdl.yml",
        "pyproject.toml",
        ".gitignore",
        "fdl",
        "constraints.txt",
    ):
        assert (proj / rel).is_file(), rel
    assert (proj / "fdl").stat().st_mode & 0o111
    text = (proj / "pyproject.toml").read_text()
    assert '"flodl-core==0.1.0"' in text and "flodl-hf" not in text.split("[project.optional")[0]
    assert subprocess.run(["sh", "-n", str(proj / "fdl")]).returncode == 0
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=proj, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert tests.returncode == 0, tests.stdout[-3000:]
    train = fdl("train", "--", "--epochs", "1", "--out", str(tmp_path / "run"), cwd=proj)
    assert train.returncode == 0, train.stderr[-3000:]
    assert "epoch 1/1" in train.stdout and "accuracy:" in train.stdout
    assert (tmp_path / "run" / "model.fdl").is_file()


def test_with_hf_and_refusals(fdl: Fdl, tmp_path: Path) -> None:
    assert fdl("init", "withhf", "--with-hf", "--no-wheels", cwd=tmp_path).returncode == 0
    assert '"flodl-hf==0.1.0"' in (tmp_path / "withhf" / "pyproject.toml").read_text()
    again = fdl("init", "withhf", cwd=tmp_path)
    assert again.returncode == 1 and "already exists and is not empty" in again.stderr
    bad = fdl("init", "9lives", cwd=tmp_path)
    assert bad.returncode == 2 and "start with a letter" in bad.stderr


def test_distributed_path_through_flodl_ddp(fdl: Fdl, tmp_path: Path) -> None:
    ddp = pytest.importorskip("flodl_ddp")
    if not hasattr(ddp, "Trainer"):
        pytest.skip("flodl_ddp has no Trainer in this build")
    assert fdl("init", "d", "--no-wheels", cwd=tmp_path).returncode == 0
    proc = fdl("train", "--", "--epochs", "1", "--ranks", "2", "--out", str(tmp_path / "r"),
               cwd=tmp_path / "d", timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "r" / "model.fdl").is_file()
    zero = fdl("train", "--", "--ranks", "0", cwd=tmp_path / "d")
    assert zero.returncode == 2 and "--ranks must be 1 or more, got 0" in zero.stderr


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--epochs", "0"], "--epochs must be 1 or more, got 0"),
        (["--batch-size", "-3"], "--batch-size must be 1 or more, got -3"),
        (["--lr", "nan"], "--lr must be a positive number, got nan"),
        (["--lr", "0"], "--lr must be a positive number, got 0.0"),
        (["--seed", "-1"], "--seed must be 0 or more, got -1"),
        (["--serve", "70000"], "--serve must be a port in 0..65535"),
        (["--ranks", "2", "--mode", "bogus"], "--mode: unknown mode 'bogus'; valid names:"),
        (["--mode", "cpu-async"], "--mode picks how several processes train: add --ranks N"),
        (["--out", "/proc/no/such"], "--out /proc/no/such: cannot create it"),
    ],
)
def test_scaffold_train_refuses_each_bad_option_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    argv: list[str], says: str,
) -> None:  # fmt: skip
    if "--mode" in argv and "--ranks" in argv:
        pytest.importorskip("flodl_ddp")
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "train.py").write_text(render("p", "0.1.0", False)["train.py"])
    spec = importlib.util.spec_from_file_location("scaffold_train", proj / "train.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    monkeypatch.chdir(proj)
    monkeypatch.delenv("FLODL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(sys, "argv", ["train.py", *argv])
    with pytest.raises(SystemExit) as e:
        train.main()
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not (proj / "runs").exists()  # refused before anything was written


def test_several_processes_without_flodl_ddp_say_how_to_install_it(
    fdl: Fdl, tmp_path: Path
) -> None:
    assert fdl("init", "d", "--no-wheels", cwd=tmp_path).returncode == 0
    blocked = (  # the project's train.py where flodl_ddp cannot be imported
        "import runpy, sys; sys.modules['flodl_ddp'] = None; "
        "sys.argv = ['train.py', '--ranks', '2', '--epochs', '1', '--out', 'r']; "
        "runpy.run_path('train.py', run_name='__main__')"
    )
    proc = subprocess.run(
        [sys.executable, "-c", blocked], cwd=tmp_path / "d", capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "this project's `ddp` extra" in proc.stderr and "-e '.[dev,ddp]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_pins_torch_and_says_where_flodl_comes_from(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("init", "p", "--no-wheels", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    proj = tmp_path / "p"
    assert f"\ntorch=={TORCH_VERSION}\n" in (proj / "constraints.txt").read_text()
    assert f"constraints.txt  torch=={TORCH_VERSION}" in proc.stdout
    # No wheels/: the output and the README say how to build them when the index lacks flodl.
    rebuild = f"pip wheel --no-deps -w {proj.resolve() / 'wheels'} /path/to/flodl/packages/flodl-*"
    assert rebuild in proc.stdout and "lacks flodl-cli==0.1.0" in proc.stdout
    assert "pip wheel --no-deps -w wheels /path/to/flodl/packages/flodl-*" in (
        (proj / "README.md").read_text()
    )
    assert not (proj / "wheels").exists()
    script = (proj / "fdl").read_text()
    assert '"$ROOT/constraints.txt"' in script.split("stamp_now=", 1)[1].splitlines()[0]


def test_rendered_from_a_clone_names_it() -> None:
    files = render("p", "0.1.0", False, torch="2.9.1", clone=Path("/src/flo dl"))
    assert files["constraints.txt"].splitlines()[-1] == "torch==2.9.1"
    readme = files["README.md"]
    assert "from the flodl clone at `/src/flo dl` into `wheels/`" in readme
    assert "pip wheel --no-deps -w wheels '/src/flo dl'/packages/flodl-*" in readme
    script = files["fdl"]
    assert "'/src/flo dl'" in script and '--find-links "$WHEELS"' in script
    assert 'pip_install -e "$ROOT[dev,ddp]"' in script  # train.py's --ranks / --gpus path
    assert "{{" not in "".join(files.values())


def test_failed_wheel_build_leaves_no_folder(tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    bad = clone / "packages" / "flodl-bad"
    bad.mkdir(parents=True)
    (bad / "pyproject.toml").write_text("[build-system]\nrequires = [\n")  # not TOML
    with pytest.raises(CliError) as e:
        wh.build(clone, tmp_path / "proj" / "wheels")
    assert f"could not build the flodl wheels from {clone}" in str(e.value)
    assert not (tmp_path / "proj" / "wheels").exists()
    assert list((tmp_path / "proj").iterdir()) == []


def test_add_install_uses_the_project_wheels_and_pins(fdl: Fdl, tmp_path: Path) -> None:
    assert fdl("init", "p", "--no-wheels", cwd=tmp_path).returncode == 0
    proj = tmp_path / "p"
    (proj / "wheels").mkdir()
    proc = fdl("add", "flodl-hf", "--install", "--dry-run", cwd=proj)
    assert proc.returncode == 0, proc.stderr
    wanted = (
        f"would run: {sys.executable} -m pip install flodl-hf==0.1.0 "
        f"-c {proj.resolve() / 'constraints.txt'} --find-links {proj.resolve() / 'wheels'}"
    )
    assert wanted in proc.stdout
