"""Every example script runs to completion (each in a subprocess with a fresh working dir).

Examples run in their quick mode, asked for with ``--quick`` as the docs say (one run checks
that ``FLODL_EXAMPLE_QUICK=1`` does the same), and offline (``FLODL_OFFLINE=1``: dataset
fetches never download), so a test never touches the network.
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLES = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("test_"))
OFFLINE = {"FLODL_EXAMPLE_QUICK": "1", "FLODL_OFFLINE": "1"}


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_with_quick(script: Path, run_script: Callable[..., object]) -> None:
    # FLODL_EXAMPLE_QUICK=0: only the flag asks for the quick mode (a script that refused
    # --quick, or ignored it, fails or outruns the timeout here).
    run_script(script, "--quick", timeout=240, FLODL_EXAMPLE_QUICK="0", FLODL_OFFLINE="1")


def test_every_example_documents_quick() -> None:
    for script in EXAMPLES:
        text = script.read_text()
        assert '"--quick"' in text and "FLODL_EXAMPLE_QUICK" in text, script.name


def test_quick_flag_and_environment_agree(
    run_script: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """The quickstart's quick mode is 5 epochs, by the flag or by the environment."""
    by_flag = run_script(HERE / "quickstart.py", "--quick", FLODL_OFFLINE="1").stdout
    by_env = run_script(HERE / "quickstart.py", **OFFLINE).stdout
    for out in (by_flag, by_env):
        assert "epoch 5/5" in out and "/30" not in out


def test_mnist_falls_back_to_synthetic_and_says_so(
    tmp_path: Path, run_script: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """With an empty cache and downloads off, the LeNet example trains on synthetic digits and
    says so on stderr; nothing is downloaded."""
    cache = tmp_path / "empty-cache"
    proc = run_script(HERE / "mnist_lenet.py", timeout=240, FLODL_DATA=str(cache), **OFFLINE)
    assert "MNIST unavailable" in proc.stderr and "SYNTHETIC" in proc.stderr
    assert "synthetic test accuracy" in proc.stdout
    assert not (cache / "mnist").exists() or not any((cache / "mnist").iterdir())


COUNTED = {  # script -> (its command-line entry point, the option that counts its epochs or steps)
    "quickstart": ("main", "--epochs"),
    "mixed_precision": ("main", "--epochs"),
    "mnist_lenet": ("main", "--epochs"),
    "residual_flowbuilder": ("main", "--epochs"),
    "schedulers": ("cli", "--epochs"),
    "showcase": ("cli", "--steps"),
    "sine_wave": ("main", "--epochs"),
}


@pytest.mark.parametrize("name", sorted(COUNTED))
def test_zero_epochs_is_refused_not_replaced_by_the_default(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--epochs 0`` (``--steps 0``) exits with a usage error naming the option; it once fell
    back to the default count silently (``args.epochs or 30``)."""
    entry, option = COUNTED[name]
    spec = importlib.util.spec_from_file_location(f"example_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit) as e:
        getattr(module, entry)([option, "0"])
    assert e.value.code == 2 and f"{option} must be" in capsys.readouterr().err
