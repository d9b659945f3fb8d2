import subprocess
import sys
from pathlib import Path

import pytest

from flodl_cli import _main
from flodl_cli._workspace import find_root

from .conftest import Fdl

ROOT = Path(__file__).resolve().parents[3]


def test_version_lists_installed_flodl_distributions(fdl: Fdl) -> None:
    proc = fdl("--version")
    assert proc.returncode == 0
    assert proc.stdout.startswith("fdl 0.1.0")
    assert fdl("-V").stdout == proc.stdout


def test_help_lists_builtins_and_exits_0(fdl: Fdl) -> None:
    proc = fdl("--help")
    assert proc.returncode == 0
    for name in ("setup", "init", "diagnose", "probe", "api-ref", "completions", "run"):
        assert f"\n  {name} " in proc.stdout


def test_no_command_prints_help_and_exits_2(fdl: Fdl) -> None:
    proc = fdl()
    assert proc.returncode == 2
    assert "usage: fdl" in proc.stderr and "a command is required" in proc.stderr


def test_help_hides_what_is_not_installed(fdl: Fdl, tmp_path: Path) -> None:
    # Outside a flodl clone there is no test suite to run; ddp-bench/hf only when importable.
    out = fdl("--help", cwd=tmp_path).stdout
    assert "\n  test " not in out
    import importlib.util

    assert ("\n  ddp-bench " in out) == (importlib.util.find_spec("ddp_bench") is not None)
    hf = importlib.util.find_spec("flodl_cli._cmd_hf") and importlib.util.find_spec("flodl_hf")
    assert ("\n  hf " in out) == bool(hf)


def test_wrong_global_flag_prints_usage_and_hint(fdl: Fdl) -> None:
    proc = fdl("--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: fdl")
    assert "unrecognized arguments: --bogus" in proc.stderr and "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_command_suggests_the_close_one(fdl: Fdl) -> None:
    proc = fdl("diagnos")
    assert proc.returncode == 2
    assert "unknown command 'diagnos'" in proc.stderr
    assert "did you mean 'fdl diagnose'?" in proc.stderr


def test_wrong_command_flag_prints_its_usage(fdl: Fdl) -> None:
    proc = fdl("setup", "--nope")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: fdl setup")
    assert "hint: see: fdl setup --help" in proc.stderr


def test_missing_argument_prints_usage(fdl: Fdl) -> None:
    proc = fdl("init")
    assert proc.returncode == 2
    assert "usage: fdl init" in proc.stderr and "NAME" in proc.stderr


def test_test_help_is_flodls_own(fdl: Fdl) -> None:
    proc = fdl("test", "--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: fdl test [NOX ARGS...]")


def test_verbosity_is_exported_to_children(fdl: Fdl, tmp_path: Path) -> None:
    script = tmp_path / "v.py"
    script.write_text("import os; print(os.environ['FLODL_VERBOSITY'])")
    assert fdl("-vv", "run", str(script)).stdout.strip() == "debug"
    assert fdl("-q", "run", str(script)).stdout.strip() == "quiet"
    assert fdl("run", str(script)).stdout.strip() == "normal"


def test_unexpected_error_is_one_line_and_v_shows_the_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def boom(*a: object) -> int:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(_main, "_dispatch", boom)
    assert _main.main(["diagnose"]) == 1
    err = capsys.readouterr().err
    assert (
        err.strip() == "fdl: internal error: RuntimeError: kaboom (run with -v for the traceback)"
    )
    assert _main.main(["-v", "diagnose"]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_find_root_walks_up_and_honours_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FDL_ROOT", raising=False)
    (tmp_path / "noxfile.py").write_text("")
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert find_root(deep) == tmp_path.resolve()
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.setenv("FDL_ROOT", str(other))
    assert find_root(deep) == other.resolve()


def test_find_root_none_outside_a_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FDL_ROOT", raising=False)
    assert find_root(tmp_path) is None


def test_run_executes_a_script_with_its_args(fdl: Fdl, tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    out = tmp_path / "out.txt"
    script.write_text(f"import sys; open({str(out)!r}, 'w').write(' '.join(sys.argv[1:]))")
    assert fdl("run", str(script), "--epochs", "3").returncode == 0
    assert out.read_text() == "--epochs 3"


def test_run_takes_gpus_before_the_script_and_leaves_the_script_its_own(
    fdl: Fdl, tmp_path: Path
) -> None:
    script = tmp_path / "s.py"
    script.write_text("import os, sys; print(os.environ['CUDA_VISIBLE_DEVICES'], *sys.argv[1:])")
    rows = ["0, A100, 40960, 40000, 8.0, 550.54", "1, A100, 40960, 40000, 8.0, 550.54"]
    proc = fdl("run", "--gpus", "1", str(script), "--gpus", "7", gpus=rows)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "1 --gpus 7"
    assert fdl("--gpus", "0,1", "run", str(script), gpus=rows).stdout.strip() == "0,1"


def test_run_reports_a_failing_script(fdl: Fdl, tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("raise SystemExit(3)")
    assert fdl("run", str(script)).returncode == 3


def test_run_missing_script_names_it(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("run", str(tmp_path / "nope.py"))
    assert proc.returncode == 1
    assert "no such script:" in proc.stderr and "nope.py" in proc.stderr


def test_test_outside_workspace_explains(fdl: Fdl, tmp_path: Path) -> None:
    proc = fdl("test", cwd=tmp_path)
    assert proc.returncode == 1
    assert "no flodl workspace here" in proc.stderr and "Traceback" not in proc.stderr


def test_test_hands_arguments_to_nox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from flodl_cli import _cmd_run

    calls: list[tuple[list[str], str]] = []

    def fake_call(cmd: list[str], cwd: Path, env: dict[str, str]) -> int:
        calls.append((cmd, str(cwd)))
        return 0

    (tmp_path / "noxfile.py").write_text("")
    monkeypatch.setenv("FDL_ROOT", str(tmp_path))
    monkeypatch.setattr(_cmd_run, "call", fake_call)
    assert _main.main(["test", "-s", "lint"]) == 0
    assert calls == [([sys.executable, "-m", "nox", "-s", "lint"], str(tmp_path.resolve()))]


@pytest.mark.skipif(not (ROOT / "fdl").is_file(), reason="not in a flodl clone")
@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "fdl").exists(), reason="no workspace .venv")
def test_bootstrap_works_from_any_directory(tmp_path: Path) -> None:
    # `/path/to/flodl/fdl run --help` from elsewhere: the bootstrap exports its root.
    proc = subprocess.run(
        [str(ROOT / "fdl"), "test", "--help"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    script = tmp_path / "root.py"
    script.write_text("import os; print(os.environ['FDL_ROOT'])")
    proc = subprocess.run(
        [str(ROOT / "fdl"), "run", str(script)], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.stdout.strip() == str(ROOT)


def test_console_script_starts_without_torch() -> None:
    code = (
        "import sys; from flodl_cli import main\n"
        "for a in (['--version'], ['--help']):\n"
        "    try: main(a)\n"
        "    except SystemExit: pass\n"
        "print(sorted(m for m in ('torch', 'aiohttp', 'flodl_core', 'yaml') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("[]")
