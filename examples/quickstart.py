"""Quickstart: build a residual MLP with FlowBuilder, train it, watch it with the monitor.

Run with ``./fdl run`` (add ``--serve 3000`` for the live dashboard at http://127.0.0.1:3000;
``--quick`` or ``FLODL_EXAMPLE_QUICK=1`` for 5 epochs). Prints one line per epoch and writes
``runs/quickstart/report.html``, the whole run as one offline page.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch
from torch import nn

import flodl_core as fc
from flodl_graph import FlowBuilder
from flodl_monitor import Monitor


def make_data(n: int = 2048) -> tuple[torch.Tensor, torch.Tensor]:
    """A smooth 2-D -> 2-D target: x: (n, 2), y: (n, 2)."""
    x = torch.randn(n, 2)
    y = torch.stack([torch.sin(x[:, 0]) * x[:, 1], x[:, 0] - 0.5 * x[:, 1] ** 2], dim=1)
    return x, y


def build_model() -> nn.Module:
    # The seed's quickstart: a chain with a residual block (`also` adds the input back).
    return (
        FlowBuilder(fc.Linear(2, 16))
        .through(fc.GELU())
        .through(fc.LayerNorm(16))
        .also(fc.Linear(16, 16))
        .through(fc.Linear(16, 2))
        .build()
    )


def parse_args(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 30 (--quick: 5)")
    parser.add_argument("--quick", action="store_true", help="5 epochs, for a smoke run")
    parser.add_argument("--serve", type=int, metavar="PORT", help="serve the live dashboard")
    parser.add_argument("--out", type=Path, default=Path("runs/quickstart"))
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    if args.epochs is None:
        args.epochs = 5 if quick else 30
    if args.serve is not None and not 0 <= args.serve <= 65535:
        parser.error(f"--serve must be a port in 0..65535 (0: any free one), got {args.serve}")
    return parser, args


def main(argv: list[str] | None = None) -> float:
    parser, args = parse_args(argv)

    fc.manual_seed(0)
    x, y = make_data()
    loader = fc.DataLoader((x, y), batch_size=64, names=["input", "target"])
    model = build_model()
    opt = fc.Adam(model.parameters(), lr=0.01)
    # The schedule is applied once per epoch (steps 0 .. epochs-1). Cosine reaches min_lr at its
    # step `total`, which comes `warmup` steps late: total = epochs - warmup - 1 puts min_lr on
    # the last epoch.
    warmup = 2
    if args.epochs < warmup + 2:
        parser.error(
            f"--epochs must be at least {warmup + 2} (warmup {warmup} + cosine), got {args.epochs}"
        )
    cosine = fc.Cosine(0.01, total=args.epochs - warmup - 1, min_lr=1e-4)
    sched = fc.Warmup(cosine, warmup_steps=warmup)

    monitor = Monitor(args.epochs)
    if args.serve is not None:
        monitor.serve(args.serve)  # prints the URL
    # Registered now, so an interrupted run (Ctrl-C) still leaves the report of its epochs.
    report = monitor.save_html(args.out / "report.html")
    try:
        model.train()
        for epoch in range(args.epochs):
            t0 = time.perf_counter()
            sched.apply(opt, epoch)
            # track(): the first epoch's ETA leaves out the first steps' warm-up
            for batch in monitor.track(loader.epoch(epoch)):
                loss = fc.mse_loss(model(batch["input"]), batch["target"])
                opt.zero_grad()
                loss.backward()
                fc.clip_grad_norm(model.parameters(), 1.0)
                opt.step()
                model.record_scalar("loss", loss.item())  # batch values, averaged by flush()
            model.record_scalar("lr", opt.lr())
            model.flush()  # batch buffers -> one epoch value per metric (the mean)
            monitor.log(epoch, time.perf_counter() - t0, model)  # reads model.latest_metrics()
    finally:
        monitor.finish()  # rewrites the report: final, or partial after Ctrl-C
    print(f"  report: {report}")
    if args.serve is not None:
        monitor.keep_serving()  # the page stays up until Ctrl-C
    monitor.stop()
    return model.trend("loss").latest()


if __name__ == "__main__":
    main()
