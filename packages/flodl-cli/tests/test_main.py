import subprocess
import sys
from pathlib import Path

import pytest

from flodl_cli import _main
from flodl_cli._workspace import find_root


def test_version_lists_installed_flodl_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _main.main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("fdl 0.1.0")
    assert "flodl-core 0.1.0" in out


def test_help_lists_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert _main.main([]) == 0
    out = capsys.readouterr().out
    assert "run" in out and "test" in out


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


def test_run_executes_a_script_with_its_args(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    out = tmp_path / "out.txt"
    script.write_text(f"import sys; open({str(out)!r}, 'w').write(' '.join(sys.argv[1:]))")
    assert _main.main(["run", str(script), "--epochs", "3"]) == 0
    assert out.read_text() == "--epochs 3"


def test_run_reports_a_failing_script(tmp_path: Path) -> None:
    script = tmp_path / "bad.py"
    script.write_text("raise SystemExit(3)")
    assert _main.main(["run", str(script)]) == 3


def test_run_missing_script_names_it(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no such script: .*nope\.py"):
        _main.main(["run", str(tmp_path / "nope.py")])


def test_test_outside_workspace_explains(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FDL_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match="no flodl workspace here"):
        _main.main(["test"])


def test_test_hands_arguments_to_nox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[list[str], str]] = []

    def fake_call(cmd: list[str], cwd: Path, env: dict[str, str]) -> int:
        calls.append((cmd, str(cwd)))
        return 0

    (tmp_path / "noxfile.py").write_text("")
    monkeypatch.setenv("FDL_ROOT", str(tmp_path))
    monkeypatch.setattr(_main.subprocess, "call", fake_call)
    assert _main.main(["test", "-s", "lint"]) == 0
    assert calls == [([sys.executable, "-m", "nox", "-s", "lint"], str(tmp_path.resolve()))]


def test_console_script_starts_without_torch() -> None:
    code = "import sys, flodl_cli._main as m; m._version_text(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_mismatched_core_release_exits_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda d: "0.0.9" if d == "flodl-core" else real(d))
    with pytest.raises(SystemExit, match=r"found flodl-core==0\.0\.9; fix with: pip install"):
        _main.main(["--version"])
