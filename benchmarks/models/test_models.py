"""Every benchmark model: the flodl graph and the hand-written module start from the same
weights and agree on forward values and gradients; run.py runs end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from models import MODELS  # noqa: E402


@pytest.mark.parametrize("name", list(MODELS))
def test_flodl_and_hand_agree(name: str) -> None:
    bench = MODELS[name]
    fl, hand = bench.make("flodl"), bench.make("hand")
    pf, ph = list(fl.parameters()), list(hand.parameters())
    assert [p.shape for p in pf] == [p.shape for p in ph]
    assert all(a.equal(b) for a, b in zip(pf, ph, strict=True)), (
        "same seed must give the same weights"
    )
    x, y = bench.data(2)
    outs = []
    for model in (fl, hand):
        out = model(x)
        bench.loss(out, y).backward()
        outs.append(out.detach())
    torch.testing.assert_close(outs[0], outs[1], atol=1e-6, rtol=0)
    for (n, a), b in zip(fl.named_parameters(), ph, strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=0, msg=n)


def test_run_py_writes_its_section(tmp_path: Path) -> None:
    out = tmp_path / "benchmark.md"
    out.write_text(
        "# Benchmarks\n\nother section\n<!-- graph:start -->\nold\n<!-- graph:end -->\nkeep\n"
    )
    proc = subprocess.run(
        [sys.executable, str(HERE.parent / "run.py"), "--rounds", "1", "--steps", "1",
         "--warmup", "0", "--models", "mlp,gated_routing", "--no-compile",
         "--overhead-reps", "5", "--output", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "other section" in text and text.rstrip().endswith("keep") and "old" not in text
    assert "| mlp |" in text and "| gated_routing |" in text and "Eager ratio" in text
    bad = subprocess.run([sys.executable, str(HERE.parent / "run.py"), "--models", "nope"],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 2 and "unknown model(s) ['nope']" in bad.stderr
