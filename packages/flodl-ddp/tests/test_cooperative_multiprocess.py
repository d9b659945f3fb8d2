"""Two ranks started like torchrun's (one gloo group, one thread each), one spawn for both checks:

- EASGD with ``alpha = 0.3`` over gloo and over shared memory blends ``(1 - a) W + a W_avg``
  (a swapped blend gives the same numbers at ``alpha = 0.5`` only);
- the cooperative tier, cadence and sync: rank 1 breaks out of ``session.epoch(0)``; rank 0
  fails at its next averaging (sync: its next backward) with a :class:`PeerError` that names
  rank 1 and the rule, rank 1 at its next call.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.multiprocess

HERE = Path(__file__).parent
TIMEOUT_S = 90.0
RULE = "every rank must run each epoch of session.epoch(n) to its end"


def _fixtures() -> Any:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # spawned children inherit sys.path and import by name
    return importlib.import_module("reliability_fixtures")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    fx = _fixtures()
    from rank_harness import spawn_ranks

    out = tmp_path_factory.mktemp("coop")
    return spawn_ranks(fx.cooperative_worker, 2, (), out, TIMEOUT_S)


@pytest.mark.parametrize("path", ["gloo", "shm"])
def test_easgd_blends_with_its_alpha(ranks: list[dict[str, Any]], path: str) -> None:
    """Rank r holds r + 1 and ran r + 1 batches: W_avg = (1 + 4) / 3 = 5/3, and each rank keeps
    (1 - 0.3) of its own weights: rank 0 -> 0.7 + 0.5 = 1.2, rank 1 -> 1.4 + 0.5 = 1.9."""
    a = _fixtures().EASGD_ALPHA
    avg = 5 / 3
    for r, res in enumerate(ranks):
        got = res["easgd"][path]
        assert got["shared"] is (path == "shm")
        want = (1 - a) * (r + 1) + a * avg
        assert got["weight"] == pytest.approx([want] * 6, abs=1e-6), (r, path)
        assert got["bias"] == pytest.approx([want] * 2, abs=1e-6), (r, path)
        assert got["consensus"] == pytest.approx([avg] * 6, abs=1e-6)


@pytest.mark.parametrize("mode", ["cpu-cadence", "cpu-sync"])
def test_a_rank_that_leaves_an_epoch_early_is_named(ranks: list[dict[str, Any]], mode: str) -> None:
    """Cadence: at the window's arrival. Sync: when the gradient exchange inside ``step`` fails
    (it was a bare gloo error, and the rank that stayed was told it had left epoch 0 itself)."""
    first, then, close = ranks[0][mode]["calls"]
    assert first["call"] == "epoch0" and first["peer"] and first["ddp"], first
    assert "rank 1 left the epoch before its end" in first["error"]
    assert RULE in first["error"]
    # within one window (anchor 4), not after the run's 20 s timeout
    assert ranks[0][mode]["epoch0_s"] < 10.0
    for call in (then, close):
        assert call["ddp"] and "rank 1 left the epoch" in call["error"], call


@pytest.mark.parametrize("mode", ["cpu-cadence", "cpu-sync"])
def test_the_rank_that_left_fails_at_its_next_call(ranks: list[dict[str, Any]], mode: str) -> None:
    first, then, close = ranks[1][mode]["calls"]
    assert first == {"call": "epoch0", "error": None, "ddp": False, "peer": False, "type": None}
    for call in (then, close):
        assert call["ddp"] and not call["peer"], call
        assert "rank 1 left epoch 0 before its end" in call["error"] and RULE in call["error"]
