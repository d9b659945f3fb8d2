"""Mixed precision: autocast + GradScaler, with the same loop on CPU (bfloat16) and CUDA (float16).

One training loop serves every device:

- CUDA: float16 autocast and a ``GradScaler`` (loss scaled up so small float16 gradients do
  not flush to zero; the scaler unscales before clipping and skips steps whose gradients
  overflowed);
- CPU: bfloat16 autocast, which has float32's exponent range and needs no scaler (the scaler is
  created disabled, so the same calls are no-ops).

The script trains the model in full float32 and in mixed precision from the same seed and
compares their accuracy, then shows the scaler at work on one overflowing step: the step is
skipped, the weights do not move and the scale halves.

Run with ``python examples/mixed_precision.py`` (``--quick`` or ``FLODL_EXAMPLE_QUICK=1`` for a
short run).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

import flodl_core as fc
from flodl_graph import FlowBuilder, Graph


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x: (n, 32); y: (n,) one of 4 classes, from a fixed random teacher."""
    g = torch.Generator().manual_seed(seed)
    teacher = torch.randn(32, 4, generator=torch.Generator().manual_seed(123))
    x = torch.randn(n, 32, generator=g)
    return x, (torch.tanh(x) @ teacher).argmax(dim=1)


def build_model() -> Graph:
    """(B, 32) -> (B, 4) logits."""
    return (
        FlowBuilder(fc.Linear(32, 128))
        .through(fc.GELU())
        .through(fc.LayerNorm(128))
        .also(fc.Sequential(fc.Linear(128, 128), fc.GELU()))
        .through(fc.Linear(128, 4))
        .build()
    )


def train(
    device: str, amp_dtype: torch.dtype | None, epochs: int, data: tuple[torch.Tensor, ...]
) -> tuple[float, float]:
    """Train from seed 0 with ``amp_dtype`` autocast (``None``: full float32).

    Returns ``(validation accuracy, seconds)``.
    """
    train_x, train_y, val_x, val_y = (t.to(device) for t in data)
    fc.manual_seed(0)
    model = build_model().to(device)
    opt = fc.AdamW(model, lr=3e-3, weight_decay=0.01)
    # float16 needs loss scaling; bfloat16 and float32 do not (a disabled scaler is a no-op).
    scaler = fc.GradScaler(device, enabled=amp_dtype == torch.float16)
    loader = fc.DataLoader((train_x, train_y), batch_size=64, names=["x", "y"])
    amp = {"dtype": amp_dtype or torch.float32, "enabled": amp_dtype is not None}
    t0 = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        for batch in loader.epoch(epoch):
            with fc.autocast(device, **amp):
                loss = fc.cross_entropy_loss(model(batch["x"]), batch["y"])
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.unscale_(opt)  # clip the true gradients, not the scaled ones
            fc.clip_grad_norm(model, 1.0)
            scaler.step(opt)
            scaler.update()
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad(), fc.autocast(device, **amp):
        accuracy = float((model(val_x).argmax(1) == val_y).float().mean())
    return accuracy, seconds


def overflow_step(device: str) -> None:
    """One float16 step whose gradient overflows: the scaler skips it and halves its scale."""
    fc.manual_seed(0)
    model = nn.Linear(4, 1).to(device)
    opt = fc.SGD(model, lr=0.1)
    scaler = fc.GradScaler(device, init_scale=2.0**16)
    before = model.weight.detach().clone()
    x = torch.full((2, 4), 6e4, device=device)  # float16's largest finite value is 65504
    with fc.autocast(device, dtype=torch.float16):
        loss = model(x).float().pow(2).mean()
    scaler.scale(loss).backward()
    scaler.step(opt)  # gradients hold inf: the step is skipped
    scaler.update()
    moved = not torch.equal(before, model.weight.detach())
    print(f"  overflowing step: weights moved={moved}, scale 65536 -> {scaler.get_scale():.0f}")
    assert not moved and scaler.get_scale() == 2.0**15


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Returns the validation accuracy of each precision."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 12 (--quick: 3)")
    parser.add_argument("--quick", action="store_true", help="a few epochs, for a smoke run")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    epochs = (3 if quick else 12) if args.epochs is None else args.epochs
    if epochs < 1:
        parser.error(f"--epochs must be 1 or more, got {epochs}")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    amp_dtype = torch.float16 if device.startswith("cuda") else torch.bfloat16

    data = (*make_data(4096, seed=1), *make_data(1024, seed=2))
    results: dict[str, float] = {}
    for name, dtype in (("float32", None), (f"autocast {str(amp_dtype)[6:]}", amp_dtype)):
        accuracy, seconds = train(device, dtype, epochs, data)
        results[name] = accuracy
        print(f"  {device} {name:18s} val accuracy {accuracy:.3f}  ({seconds:.2f}s)")
    full, mixed = results.values()
    # Mixed precision changes rounding, not what the model learns.
    assert mixed > 0.5 and abs(full - mixed) < 0.05, results
    overflow_step(device)
    return results


if __name__ == "__main__":
    main()
