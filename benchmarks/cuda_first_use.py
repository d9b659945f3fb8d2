"""What a fresh CUDA process pays the first time it uses each library, in order.

    python benchmarks/cuda_first_use.py [--device cuda:0]

Each line is one step's wall time (synchronised), run once and then again: the first-time cost
is the difference. flodl-ddp pays the cuBLAS / autograd and cuDNN ones before a run's clock
starts (``flodl_ddp._warmup``); the first step of a model still loads its own kernels. Needs a
CUDA device; it is not run in CI.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import torch
from torch import nn


def _timed(device: torch.device, fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize(device)
    return time.perf_counter() - t


def steps(device: torch.device) -> list[tuple[str, Callable[[], object]]]:
    """The steps, in the order a training process first meets them."""
    a = torch.ones(8, 8, device=device, requires_grad=True)
    conv = nn.Conv2d(1, 2, 3).to(device)
    img = torch.ones(2, 1, 8, 8, device=device)
    p = nn.Parameter(torch.ones(10, device=device))
    p.grad = torch.ones(10, device=device)
    adam = torch.optim.Adam([p], lr=1e-3, fused=True)
    mlp = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    x = torch.randn(64, 784, device=device)
    y = torch.randint(0, 10, (64,), device=device)
    return [
        ("matmul + backward (cuBLAS, autograd)", lambda: (a @ a).sum().backward()),
        ("conv2d + backward (cuDNN)", lambda: conv(img).sum().backward()),
        ("fused Adam step", adam.step),
        ("MLP step (its own kernels)", lambda: nn.functional.cross_entropy(mlp(x), y).backward()),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0", help="the CUDA device (default cuda:0)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("cuda_first_use: needs a CUDA device; this torch sees none", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    context = _timed(device, lambda: torch.zeros(1, device=device))
    print(f"flodl cuda_first_use: {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    print(f"{'step':40s} {'first (s)':>10s} {'again (s)':>10s}")
    print(f"{'context (first tensor)':40s} {context:10.4f} {'':>10s}")
    for name, fn in steps(device):
        first, again = _timed(device, fn), _timed(device, fn)
        print(f"{name:40s} {first:10.4f} {again:10.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
