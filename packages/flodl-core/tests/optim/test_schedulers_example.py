"""examples/schedulers.py runs and its lr follows min(warmup+cosine, plateau)."""

from __future__ import annotations

import contextlib
import io
import math
import runpy
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "schedulers.py"


@pytest.mark.skipif(not EXAMPLE.exists(), reason="examples/ is not shipped with the package")
def test_schedulers_example_composes_warmup_cosine_and_plateau() -> None:
    namespace = runpy.run_path(str(EXAMPLE), run_name="schedulers_example")
    out = io.StringIO()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest, and robust to a busy machine
    try:
        with contextlib.redirect_stdout(out):
            history = namespace["main"](epochs=40)
    finally:
        torch.set_num_threads(threads)
    assert len(history) == 40 and "epoch  40/40" in out.getvalue()
    lrs = [lr for _, lr, _ in history]
    peak = 3e-2
    assert all(lr <= peak * (1 + 1e-9) for lr in lrs)
    assert lrs[0] < lrs[1] < lrs[2]  # warmup (4 epochs of 40) ramps up
    # The plateau ceiling took over at some point: an lr of exactly peak / 2^k, k >= 1.
    halvings = [round(math.log2(peak / lr)) for lr in lrs]
    assert any(
        k >= 1 and math.isclose(lr, peak / 2**k) for k, lr in zip(halvings, lrs, strict=True)
    )
    assert lrs[-1] == pytest.approx(1e-4, rel=0.5)  # cosine floor or plateau floor at the end
    vals = [v for _, _, v in history]
    assert min(vals) < 0.5 * vals[0]  # it trained
