"""LeNet-5 on MNIST: fetch the real files, parse them, train a FlowBuilder CNN with the monitor.

``fetch("mnist", DIR)`` downloads the four canonical IDX files once (checked by SHA-256) and
``Mnist.parse`` reads them; later runs use the cache without any network. When the files cannot
be had (offline, ``--offline`` or ``FLODL_OFFLINE=1``) the script says so and falls back to a
synthetic digit set written in the same IDX format and read by the same parser, so every step
still runs; its accuracy says nothing about MNIST.

Run with ``python examples/mnist_lenet.py`` (``--quick`` or ``FLODL_EXAMPLE_QUICK=1``: 2,000
training images and 2 epochs). ``--data-dir`` sets the cache (default ``$FLODL_DATA/mnist``,
``~/.cache/flodl/mnist`` without it); ``--synthetic`` skips the real data.
"""

from __future__ import annotations

import argparse
import gzip
import os
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch

import flodl_core as fc
from flodl_core.data.datasets import Mnist
from flodl_graph import FlowBuilder, Graph
from flodl_monitor import Monitor


def build_lenet() -> Graph:
    """LeNet-5: images (B, 1, 28, 28) -> logits (B, 10)."""
    return (
        FlowBuilder(fc.Conv2d(1, 6, 5, padding=2))  # (B, 6, 28, 28)
        .through(fc.ReLU())
        .through(fc.MaxPool2d(2))  # (B, 6, 14, 14)
        .through(fc.Conv2d(6, 16, 5))  # (B, 16, 10, 10)
        .through(fc.ReLU())
        .through(fc.MaxPool2d(2))  # (B, 16, 5, 5)
        .through(fc.Flatten())  # (B, 400)
        .tag("features")
        .through(fc.Linear(400, 120))
        .through(fc.ReLU())
        .through(fc.Linear(120, 84))
        .through(fc.ReLU())
        .through(fc.Linear(84, 10))
        .tag("logits")
        .build()
    )


def synthetic_idx(n: int, seed: int) -> tuple[bytes, bytes]:
    """``n`` synthetic 28x28 "digits" as gzipped IDX files (images, labels).

    Each class is a fixed pattern of four random strokes; a sample is its class pattern shifted
    by up to 3 pixels, with random stroke intensity and pixel noise.
    """
    templates = np.zeros((10, 28, 28), dtype=np.float32)
    shapes = np.random.default_rng(1234)  # the same classes for every split
    for c in range(10):
        for _ in range(4):
            (r0, c0), (r1, c1) = shapes.integers(6, 22, size=(2, 2))
            for t in np.linspace(0.0, 1.0, 40):
                r, col = round(r0 + t * (r1 - r0)), round(c0 + t * (c1 - c0))
                templates[c, r - 1 : r + 1, col - 1 : col + 1] = 1.0
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    shifts = rng.integers(-3, 4, size=(n, 2))
    images = np.empty((n, 28, 28), dtype=np.float32)
    for i, (label, (dr, dc)) in enumerate(zip(labels, shifts, strict=True)):
        images[i] = np.roll(templates[label], (dr, dc), axis=(0, 1)) * rng.uniform(0.6, 1.0)
    images += rng.normal(0.0, 0.15, size=images.shape)
    pixels = (np.clip(images, 0.0, 1.0) * 255).astype(np.uint8)
    images_gz = gzip.compress(struct.pack(">4I", 2051, n, 28, 28) + pixels.tobytes())
    labels_gz = gzip.compress(struct.pack(">2I", 2049, n) + labels.astype(np.uint8).tobytes())
    return images_gz, labels_gz


def load_data(data_dir: Path, download: bool | None, synthetic: bool) -> tuple[Mnist, Mnist, str]:
    """(train, test, name of the source). Real MNIST when available, else the synthetic set."""
    if not synthetic:
        try:
            files = fc.data.datasets.fetch("mnist", data_dir, download=download)
        except fc.FetchError as e:
            reason = str(e).splitlines()[0].rstrip(":")
            print(f"  MNIST unavailable ({reason})", file=sys.stderr)
            print(
                "  falling back to SYNTHETIC digits: the pipeline runs, the accuracy is not "
                "an MNIST result",
                file=sys.stderr,
            )
        else:
            train_images, train_labels = Mnist.FILES[True]
            test_images, test_labels = Mnist.FILES[False]
            train = Mnist.parse(files[train_images].read_bytes(), files[train_labels].read_bytes())
            test = Mnist.parse(files[test_images].read_bytes(), files[test_labels].read_bytes())
            return train, test, "MNIST"
    return Mnist.parse(*synthetic_idx(6000, 1)), Mnist.parse(*synthetic_idx(1000, 2)), "synthetic"


def default_data_dir() -> Path:
    return Path(os.environ.get("FLODL_DATA", "~/.cache/flodl")).expanduser() / "mnist"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=None, help="default 5 (--quick: 2)")
    parser.add_argument("--quick", action="store_true", help="2,000 images, 2 epochs")
    parser.add_argument("--data-dir", type=Path, default=None, help="the MNIST file cache")
    parser.add_argument("--offline", action="store_true", help="never download")
    parser.add_argument("--synthetic", action="store_true", help="use the synthetic digits")
    args = parser.parse_args(argv)
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs must be 1 or more, got {args.epochs}")
    return args


def evaluate(model: Graph, test: Mnist) -> float:
    """Share of ``test`` images classified right, in batches of 500 without gradients."""
    model.eval()
    with torch.no_grad():
        predicted = torch.cat([model(x).argmax(1) for x in test.images.split(500)])
    return float((predicted == test.labels).float().mean())


def main(argv: list[str] | None = None) -> tuple[str, float]:
    """Returns ``(data source, test accuracy)``."""
    args = parse_args(argv)
    quick = args.quick or os.environ.get("FLODL_EXAMPLE_QUICK") == "1"
    epochs = (2 if quick else 5) if args.epochs is None else args.epochs

    # download=None lets fetch decide: download unless FLODL_OFFLINE=1.
    download = False if args.offline else None
    train, test, source = load_data(args.data_dir or default_data_dir(), download, args.synthetic)
    images, labels = train.images, train.labels
    if quick:
        images, labels = images[:2000], labels[:2000]
    print(f"  {source}: {len(images)} training images, {len(test.images)} test images")

    fc.manual_seed(0)
    model = build_lenet()
    loader = fc.DataLoader((images, labels), batch_size=64, names=["image", "label"])
    opt = fc.Adam(model, lr=2e-3)
    schedule = fc.Cosine(2e-3, total=epochs * len(loader), min_lr=1e-4)
    monitor = Monitor(epochs)
    step = 0
    for epoch in range(epochs):
        t0 = time.perf_counter()
        model.train()
        for batch in loader.epoch(epoch):
            schedule.apply(opt, step)
            logits = model(batch["image"])
            loss = fc.cross_entropy_loss(logits, batch["label"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            model.record_scalar("loss", loss.item())
        accuracy = evaluate(model, test)
        model.record_scalar("test_acc", accuracy)
        model.flush()
        monitor.log(epoch, time.perf_counter() - t0, model)
    monitor.finish()
    print(f"  {source} test accuracy after {epochs} epoch(s): {accuracy:.4f}")
    assert accuracy > 0.5, accuracy  # ten classes: chance is 0.1
    return source, accuracy


if __name__ == "__main__":
    main()
