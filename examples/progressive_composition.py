"""Progressive composition: train parts alone, compose them, then train in phases.

The story of the graph tree, end to end, on a synthetic task where a hidden "teacher" maps
x -> h* (scan) -> r* (read) -> class:

1. train ``scan`` on its own (x -> h*) and save it;
2. train ``read`` on its own (h* -> r*) and save it;
3. compose ``encoder = scan -> read`` and ``model = encoder -> classifier`` from fresh modules,
   load both trained parts into the composed model by path (hash and namespace checked);
4. phase 1: freeze the encoder, train the classifier; watch the trend of its loss;
5. phase 2: when that trend stalls, thaw ``encoder.scan`` and keep training it at a lower
   learning rate (one optimizer, two parameter groups), with metrics recorded across the tree;
6. checkpoint mid-run and resume into a fresh model: the frozen set comes back exactly.

Runs in a few seconds on a CPU (``--quick`` or ``FLODL_EXAMPLE_QUICK=1`` shortens it further).
"""

from __future__ import annotations

import argparse
import os

import torch
from torch import nn
from torch.nn import functional as F

from flodl_core import manual_seed
from flodl_core.optim import Adam
from flodl_graph import FlowBuilder, Graph

D_IN, D_HID, D_READ, N_CLS = 8, 16, 6, 3
N_SAMPLES, BATCH = 512, 64
PRE_EPOCHS = 40  # --quick: 15
MAX_EPOCHS = 80  # --quick: 30


def teacher_data() -> tuple[torch.Tensor, ...]:
    """x: (N, D_IN), h*: (N, D_HID), r*: (N, D_READ), y: (N,) class indices."""
    g = torch.Generator().manual_seed(1)
    w1 = torch.randn(D_IN, D_HID, generator=g) / D_IN**0.5
    w2 = torch.randn(D_HID, D_READ, generator=g) / D_HID**0.5
    w3 = torch.randn(D_READ, N_CLS, generator=g) / D_READ**0.5
    x = torch.randn(N_SAMPLES, D_IN, generator=g)
    h = torch.tanh(x @ w1)
    r = h @ w2
    y = (r @ w3).argmax(dim=1)
    return x, h, r, y


def make_scan() -> Graph:
    return (
        FlowBuilder(nn.Linear(D_IN, D_HID)).through(nn.Tanh()).tag("hidden").label("scan").build()
    )


def make_read() -> Graph:
    return FlowBuilder(nn.Linear(D_HID, D_READ)).tag("confidence").label("read").build()


def make_model() -> Graph:
    encoder = FlowBuilder(make_scan()).through(make_read()).label("encoder").build()
    return FlowBuilder(encoder).through(nn.Linear(D_READ, N_CLS)).tag("logits").build()


def batches(*tensors: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
    return [tuple(t[i : i + BATCH] for t in tensors) for i in range(0, N_SAMPLES, BATCH)]


def pretrain(
    part: Graph, inputs: torch.Tensor, target: torch.Tensor, path: str, epochs: int
) -> float:
    """Train one component alone on MSE and save it; returns its last epoch loss."""
    opt = Adam(part.parameters(), lr=1e-2)
    for _ in range(epochs):
        for xb, tb in batches(inputs, target):
            loss = F.mse_loss(part(xb), tb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            part.record_scalar("loss", loss.item())
        part.flush()
    part.save_checkpoint(path)
    return part.trend("loss").latest()


def train_epoch(model: Graph, opt: Adam, x: torch.Tensor, h: torch.Tensor, y: torch.Tensor) -> None:
    """One epoch of the composed model, recording its loss and each part's own measure."""
    for xb, hb, yb in batches(x, h, y):
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        model.record_scalar("total_loss", loss.item())
        # Cross-boundary observation: the scan's fit, measured on its own tag.
        hidden = model.tagged_at("encoder.scan.hidden")
        model.record_at("encoder.scan.loss", F.mse_loss(hidden, hb).item())
        acc = (logits.argmax(dim=1) == yb).float().mean().item()
        model.record_at("encoder.read.accuracy", acc)
    model.flush()  # one call flushes the whole tree


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs, for a smoke run")
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    pre_epochs, max_epochs = (15, 30) if quick else (PRE_EPOCHS, MAX_EPOCHS)

    manual_seed(0)
    x, h, r, y = teacher_data()

    # 1-2. Components trained standalone, each saved with its structural hash.
    scan_loss = pretrain(make_scan(), x, h, "scan.fdl", pre_epochs)
    read_loss = pretrain(make_read(), h, r, "read.fdl.gz", pre_epochs)
    print(f"pretrained scan (mse {scan_loss:.4f}) and read (mse {read_loss:.4f})")

    # 3. Compose from fresh modules and load the trained parts by path.
    model = make_model()
    for path, file in (("encoder.scan", "scan.fdl"), ("encoder.read", "read.fdl.gz")):
        report = model.load_subgraph_checkpoint(path, file)
        print(f"loaded {len(report.loaded)} tensors into {path}")

    # 4. Phase 1: the encoder is proven, train only the classifier.
    model.freeze("encoder")
    print(model.tree_summary())
    opt = Adam.with_groups().group(model.parameters_at("logits"), lr=5e-2).build()
    phase = 1
    for epoch in range(max_epochs):
        train_epoch(model, opt, x, h, y)

        trend = model.trend("total_loss")
        # A trend of fewer than two epochs is flat (stalled) by definition: wait for five.
        if phase == 1 and len(trend) >= 5 and trend.stalled(5, 5e-3):
            # 5. Phase 2: thaw scan and fine-tune it gently next to the classifier.
            model.thaw("encoder.scan")
            opt = (
                Adam.with_groups()
                .group(model.parameters_at("encoder.scan"), lr=1e-3)
                .group(model.parameters_at("logits"), lr=1e-2)
                .build()
            )
            phase = 2
            print(f"epoch {epoch + 1}: total_loss stalled, thawed encoder.scan")
            model.save_checkpoint("phase2.fdl")
        elif phase == 2 and trend.converged(5, 1e-5):
            print(f"epoch {epoch + 1}: converged")
            break

    metrics = model.latest_metrics()
    print("  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
    assert {"total_loss", "encoder.scan.loss", "encoder.read.accuracy"} <= set(metrics)

    # 6. Resume: a fresh model gets the weights and exactly the frozen set of phase 2.
    if phase == 2:
        resumed = make_model()
        resumed.load_checkpoint("phase2.fdl")
        assert not resumed.is_frozen("encoder.scan") and resumed.is_frozen("encoder.read")
        print("resumed: encoder.read frozen, encoder.scan trainable, as saved")
    print(model.param_summary())
    model.svg("model.svg")
    model.plot_html("training.html")


if __name__ == "__main__":
    main()
