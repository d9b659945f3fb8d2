"""Which torch ``fdl setup`` installs (always pinned) and from where (the configured index when
it has the build, else PyTorch's), and what it says when neither has it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from flodl_cli import _torch_install as ti
from flodl_cli._errors import CliError
from flodl_cli._torch_builds import VARIANTS

CLONE = Path(__file__).resolve().parents[3]


def test_pin_order_constraints_then_installed_then_release(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (b / "constraints.txt").write_text("# pins\ntorchvision==0.1\ntorch==2.9.1+cu128\n")
    assert ti.torch_pin([a, b], "2.13.0+cpu") == ti.Pin(
        "2.9.1", f"pinned in {b / 'constraints.txt'}"
    )
    assert ti.torch_pin([a], "2.13.0+cpu").version == "2.13.0"
    assert ti.torch_pin([a], None).version == ti.TORCH_VERSION


@pytest.mark.skipif(not (CLONE / "constraints.txt").is_file(), reason="not in a flodl clone")
def test_release_default_matches_the_clone_pin() -> None:
    assert ti.pinned_in(CLONE / "constraints.txt") == ti.TORCH_VERSION


def test_plan_pins_version_and_build() -> None:
    pin = ti.Pin("2.13.0", "test")
    p = ti.plan(VARIANTS["cu128"], pin)
    assert p.spec == "torch==2.13.0+cu128"
    assert p.from_configured == [sys.executable, "-m", "pip", "install", "torch==2.13.0+cu128"]
    assert p.from_pytorch == [
        *p.from_configured, "--index-url", "https://download.pytorch.org/whl/cu128"
    ]  # fmt: skip
    assert "--dry-run" in p.probe and "--ignore-installed" in p.probe
    forced = ti.plan(VARIANTS["cpu"], pin, force=True)
    assert forced.from_configured[-2:] == ["--force-reinstall", "--no-deps"]


class _Pip:
    """Stands in for pip: the probe and each install succeed or fail as told; records calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, probe: bool, rcs: list[int]) -> None:
        self.calls: list[list[str]] = []
        self.rcs = rcs

        def run(cmd: list[str], **_: object) -> subprocess.CompletedProcess[str]:
            self.calls.append(["probe", *cmd])
            return subprocess.CompletedProcess(cmd, 0 if probe else 1, "", "")

        def call(cmd: list[str]) -> int:
            self.calls.append(cmd)
            return self.rcs.pop(0)

        monkeypatch.setattr(ti.subprocess, "run", run)
        monkeypatch.setattr(ti, "call", call)


def test_install_takes_the_configured_index_when_it_has_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pip = _Pip(monkeypatch, probe=True, rcs=[0])
    p = ti.plan(VARIANTS["cpu"], ti.Pin("2.13.0", "t"))
    ti.install(p)
    assert pip.calls[1] == p.from_configured  # no --index-url: a machine may reach nothing else


def test_install_falls_back_to_pytorch_index(monkeypatch: pytest.MonkeyPatch) -> None:
    pip = _Pip(monkeypatch, probe=False, rcs=[0])
    p = ti.plan(VARIANTS["cu128"], ti.Pin("2.13.0", "t"))
    ti.install(p)
    assert pip.calls[1] == p.from_pytorch


def test_failure_says_what_to_do_not_the_same_command(monkeypatch: pytest.MonkeyPatch) -> None:
    _Pip(monkeypatch, probe=False, rcs=[1])
    p = ti.plan(VARIANTS["cpu"], ti.Pin("2.13.0", "t"))
    with pytest.raises(CliError) as e:
        ti.install(p)
    text = str(e.value)
    assert "torch==2.13.0+cpu is neither on your package index nor obtainable from" in text
    assert "PIP_FIND_LINKS=DIR" in text and "constraints.txt" in text
    assert e.value.fix is not None and "pip install" not in e.value.fix
