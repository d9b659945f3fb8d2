"""fdl ddp-bench and fdl hf: forwarded when installed, an install hint when not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from .conftest import Fdl


def test_ddp_bench_forwards_or_explains(fdl: Fdl, tmp_path: Path) -> None:
    if importlib.util.find_spec("ddp_bench") is None:
        proc = fdl("ddp-bench", "--list", cwd=tmp_path)
        assert proc.returncode == 1
        assert "ddp-bench is not installed" in proc.stderr and "pip install -e" in proc.stderr
        return
    # A fake ddp_bench first on the path shows what fdl forwards.
    (tmp_path / "ddp_bench").mkdir()
    (tmp_path / "ddp_bench" / "__init__.py").write_text("")
    (tmp_path / "ddp_bench" / "__main__.py").write_text("import sys; print(sys.argv[1:])")
    proc = fdl("ddp-bench", "--list", "-x", cwd=tmp_path, PYTHONPATH=str(tmp_path))
    assert proc.stdout.strip() == "['--list', '-x']", proc.stderr


def test_ddp_bench_missing_gives_the_install_line(fdl: Fdl, tmp_path: Path) -> None:
    # Make ddp_bench unimportable for the child with a shadowing module that is not a package.
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nclass B:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ddp_bench': raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, B())\n"
    )
    proc = fdl("ddp-bench", cwd=tmp_path, PYTHONPATH=str(blocker))
    assert proc.returncode == 1
    assert "ddp-bench is not installed" in proc.stderr and "Traceback" not in proc.stderr


def test_hf_unavailable_message(fdl: Fdl) -> None:
    if importlib.util.find_spec("flodl_cli._cmd_hf") and importlib.util.find_spec("flodl_hf"):
        pytest.skip("flodl-hf commands are installed here")
    proc = fdl("hf", "classify")
    assert proc.returncode == 1
    assert "flodl-hf commands are unavailable" in proc.stderr and "fix:" in proc.stderr
