"""Checkpoint save/load: flodl's ``.fdl`` against ``torch.save``/``torch.load`` and safetensors.

A ~50M-parameter f32 model (200 MB): each side saves the same state dict to its own file and
loads it back into a model, in interleaved rounds whose order rotates each round (median
reported). flodl's save is atomic (temp file, fsync, rename) and its load validates every entry
before touching the model; ``torch.save`` does neither, so the comparison is "safe by default"
against "fast by default". ``torch.load`` runs with ``weights_only=True`` (no pickle of code).

Usage: ``python benchmarks/checkpoint.py [--rounds 5] [--width 2048] [--layers 12]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import safetensors.torch as st
import torch
from torch import nn

from flodl_core import load_checkpoint, save_checkpoint


def make_model(width: int, layers: int) -> nn.Module:
    return nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))


def sides(model: nn.Module, into: nn.Module, d: Path) -> dict[str, tuple[Callable[[], None], ...]]:
    """name -> (save, load) closures over the same state."""

    def torch_load() -> None:
        into.load_state_dict(torch.load(d / "m.pt", weights_only=True))

    def st_load() -> None:
        into.load_state_dict(st.load_file(str(d / "m.safetensors")))

    return {
        "flodl .fdl": (
            lambda: save_checkpoint(model, d / "m.fdl"),
            lambda: load_checkpoint(into, d / "m.fdl"),
        ),
        "torch.save/load": (lambda: torch.save(model.state_dict(), d / "m.pt"), torch_load),
        "safetensors": (
            lambda: st.save_file(model.state_dict(), str(d / "m.safetensors")),
            st_load,
        ),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--layers", type=int, default=12)
    args = p.parse_args()

    torch.manual_seed(0)
    model = make_model(args.width, args.layers)
    into = make_model(args.width, args.layers)
    n_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    with tempfile.TemporaryDirectory() as tmp:
        contenders = sides(model, into, Path(tmp))
        names = list(contenders)
        times: dict[tuple[str, str], list[float]] = {(n, op): [] for n in names for op in "sl"}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                for op, fn in zip("sl", contenders[name], strict=True):
                    t0 = time.perf_counter()
                    fn()
                    times[name, op].append(time.perf_counter() - t0)
        assert all(
            torch.equal(a, b)
            for a, b in zip(model.state_dict().values(), into.state_dict().values(), strict=True)
        )
    base = {op: statistics.median(times[names[0], op]) for op in "sl"}
    print(f"{n_bytes / 2**20:.0f} MiB of f32 weights, {args.rounds} rotated rounds, median")
    print(f"{'':18} {'save ms':>9} {'vs flodl':>9} {'load ms':>9} {'vs flodl':>9}")
    for name in names:
        s, ld = (statistics.median(times[name, op]) for op in "sl")
        print(
            f"{name:18} {s * 1e3:9.1f} {s / base['s']:8.2f}x {ld * 1e3:9.1f} {ld / base['l']:8.2f}x"
        )


if __name__ == "__main__":
    main()
