"""Transfer learning: pretrain an encoder, freeze it, train a new head, thaw, fine-tune.

The graph tree does the bookkeeping by path:

1. pretrain an ``encoder`` graph on a source task with plenty of labels, and save it
   (a ``.fdl`` checkpoint with its structural hash);
2. build the target model ``encoder -> head`` from fresh modules and load the pretrained
   weights into ``"encoder"`` with ``load_subgraph_checkpoint`` (names and hash checked);
3. freeze ``"encoder"`` and train only the head on the small target set;
4. thaw the encoder and fine-tune everything, the encoder at a tenth of the head's rate
   (one optimizer, two parameter groups from ``parameters_at``);
5. save the fine-tuned model (the frozen set travels with it) and resume from the file.

The same target model trained from scratch on the few target labels is the baseline.
Run with ``python examples/transfer_learning.py`` (``--quick`` or ``FLODL_EXAMPLE_QUICK=1`` for a
short run); ``--out DIR`` chooses where checkpoints go (default ``runs/transfer_learning``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch

import flodl_core as fc
from flodl_graph import FlowBuilder, Graph

D_IN, D_FEAT = 20, 32


def _shared_features(x: torch.Tensor) -> torch.Tensor:
    """The hidden structure both tasks read: (n, D_IN) -> (n, D_FEAT), nonlinear."""
    w = torch.randn(D_IN, D_FEAT, generator=torch.Generator().manual_seed(7)) / D_IN**0.5
    return torch.tanh(2 * x @ w)


def source_task(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Plenty of labels: x: (n, D_IN) -> y: (n, D_FEAT), 32 noisy measurements that mix the
    shared features."""
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(D_FEAT, D_FEAT, generator=torch.Generator().manual_seed(8)) / D_FEAT**0.5
    x = torch.randn(n, D_IN, generator=g)
    return x, _shared_features(x) @ mix + 0.05 * torch.randn(n, D_FEAT, generator=g)


def target_task(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Few labels: x: (n, D_IN) -> y: (n,), one of 3 classes read linearly from the features."""
    readout = torch.randn(D_FEAT, 3, generator=torch.Generator().manual_seed(9))
    x = torch.randn(n, D_IN, generator=torch.Generator().manual_seed(seed))
    return x, (_shared_features(x) @ readout).argmax(dim=1)


def build_encoder() -> Graph:
    """(B, D_IN) -> (B, D_FEAT), labelled ``encoder`` so it is a path in any larger graph."""
    return (
        FlowBuilder(fc.Linear(D_IN, 64))
        .through(fc.GELU())
        .through(fc.Linear(64, D_FEAT))
        .through(fc.Tanh())
        .tag("features")
        .label("encoder")
        .build()
    )


def build_model(n_out: int) -> Graph:
    """encoder -> head: (B, D_IN) -> (B, n_out)."""
    return FlowBuilder(build_encoder()).through(fc.Linear(D_FEAT, n_out)).tag("head").build()


def fit(
    model: Graph, opt: torch.optim.Optimizer, data: tuple[torch.Tensor, ...], epochs: int
) -> float:
    """Minibatch training; returns the validation score (accuracy, or -MSE for regression)."""
    x, y, val_x, val_y = data
    classify = not y.is_floating_point()
    loss_fn = fc.cross_entropy_loss if classify else fc.mse_loss
    loader = fc.DataLoader((x, y), batch_size=32)
    for epoch in range(epochs):
        model.train()
        for bx, by in loader.epoch(epoch):
            loss = loss_fn(model(bx), by)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        out = model(val_x)
        if classify:
            return float((out.argmax(1) == val_y).float().mean())
        return -float(fc.mse_loss(out, val_y))


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Returns the target-task validation accuracy of each stage and of the baseline."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer epochs, for a smoke run")
    parser.add_argument("--out", type=Path, default=Path("runs/transfer_learning"))
    args = parser.parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    scale = 1 if quick else 3
    args.out.mkdir(parents=True, exist_ok=True)

    # 1. Pretrain on the source task: 32 measurements per sample, 3000 samples.
    fc.manual_seed(0)
    source = (*source_task(3000, seed=10), *source_task(500, seed=11))
    pretrain = build_model(D_FEAT)
    score = fit(pretrain, fc.Adam(pretrain, lr=1e-2), source, epochs=10 * scale)
    print(f"  source task: val MSE {-score:.4f}")
    encoder_file = args.out / "encoder.fdl"
    pretrain.subgraph("encoder").save_checkpoint(encoder_file)

    # The target task: 3 classes read from the same features, only 60 labels.
    target = (*target_task(60, seed=20), *target_task(1000, seed=21))
    results: dict[str, float] = {}

    fc.manual_seed(1)
    scratch = build_model(3)
    results["from scratch"] = fit(scratch, fc.Adam(scratch, lr=3e-3), target, epochs=10 * scale)

    # 2. A fresh target model; the pretrained encoder goes in by path.
    fc.manual_seed(1)
    model = build_model(3)
    report = model.load_subgraph_checkpoint("encoder", encoder_file)
    print(f"  loaded {len(report.loaded)} tensors into 'encoder'")

    # 3. Frozen encoder: only the head learns.
    model.freeze("encoder")
    head_opt = fc.Adam(model.parameters_at("head"), lr=1e-2)
    results["frozen encoder"] = fit(model, head_opt, target, epochs=20 * scale)
    assert model.is_frozen("encoder")

    # 4. Thaw and fine-tune everything; the encoder moves ten times slower than the head.
    model.thaw("encoder")
    opt = (
        fc.Adam.with_groups()
        .group(model.parameters_at("encoder"), lr=3e-4)
        .group(model.parameters_at("head"), lr=3e-3)
        .build()
    )
    results["fine-tuned"] = fit(model, opt, target, epochs=5 * scale)

    # 5. Save mid-run with part of the model frozen; a resumed model gets the same frozen set.
    model.freeze("encoder")
    model.save_checkpoint(args.out / "finetuned.fdl")
    resumed = build_model(3)
    resumed.load_checkpoint(args.out / "finetuned.fdl")
    assert resumed.is_frozen("encoder") and not resumed.is_frozen("head")
    assert torch.equal(resumed.state_dict()["head.weight"], model.state_dict()["head.weight"])

    for stage, accuracy in results.items():
        print(f"  target task, {stage:15s} val accuracy {accuracy:.3f}")
    # The pretrained features carry over: they beat learning from 60 labels alone.
    assert results["frozen encoder"] > results["from scratch"], results
    return results


if __name__ == "__main__":
    main()
