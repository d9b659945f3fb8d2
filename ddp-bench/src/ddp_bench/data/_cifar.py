"""CIFAR-10 for the bench: the user's files, the canonical download, or a labelled synthetic set.

No PyPI package ships CIFAR-10, so without files and network the bench trains on a synthetic
10-class set of the same shape; every log line and report row of such a run says "synthetic".
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
import torch.nn.functional as F

from flodl_core import FetchError
from flodl_core.data.datasets import Cifar10, fetch

from ._bundle import DataBundle, find_first

logger = logging.getLogger("ddp_bench")

SYNTHETIC_TRAIN = 10_000
SYNTHETIC_TEST = 2_000
_BATCHES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))


def _from_folder(folder: Path) -> tuple[Cifar10, Cifar10] | None:
    archive = find_first(folder, (Cifar10.ARCHIVE,))
    if archive is not None:
        blob = archive.read_bytes()
        return Cifar10.parse_archive(blob, train=True), Cifar10.parse_archive(blob, train=False)
    bins = folder / "cifar-10-batches-bin"
    if all((bins / n).is_file() for n in (*_BATCHES, "test_batch.bin")):
        train = Cifar10.parse([(bins / n).read_bytes() for n in _BATCHES])
        return train, Cifar10.parse([(bins / "test_batch.bin").read_bytes()])
    return None


def synthetic_cifar(
    seed: int = 0, n_train: int = SYNTHETIC_TRAIN, n_test: int = SYNTHETIC_TEST
) -> tuple[Cifar10, Cifar10]:
    """A learnable stand-in with CIFAR-10's shapes: each class is a smooth random colour pattern
    (4x4 noise upsampled to 32x32); a sample is its class pattern, randomly shifted by up to 4
    pixels, plus pixel noise, in [0, 1]. Not CIFAR-10: accuracies on it mean nothing for CIFAR.
    """
    g = torch.Generator().manual_seed(seed)
    templates = F.interpolate(torch.rand(10, 3, 4, 4, generator=g), size=32, mode="bilinear")

    def draw(n: int) -> Cifar10:
        labels = torch.randint(0, 10, (n,), generator=g)
        shifts = torch.randint(-4, 5, (n, 2), generator=g)
        base = templates[labels]
        images = torch.empty_like(base)
        # a per-sample translation keeps the task from being a lookup; one roll per distinct shift
        keys = (shifts[:, 0] + 4) * 9 + (shifts[:, 1] + 4)
        for key in keys.unique().tolist():
            idx = (keys == key).nonzero().flatten()
            dy, dx = key // 9 - 4, key % 9 - 4
            images[idx] = torch.roll(base[idx], shifts=(dy, dx), dims=(2, 3))
        images = (0.6 * images + 0.4 * torch.rand(images.shape, generator=g)).clamp_(0, 1)
        return Cifar10(images, labels)

    return draw(n_train), draw(n_test)


def load_cifar10(data_dir: Path, *, download: bool, seed: int = 0) -> DataBundle:
    """CIFAR-10 from ``data_dir`` (or ``data_dir/cifar10``), the download, else synthetic."""
    for folder in (data_dir, data_dir / "cifar10"):
        found = _from_folder(folder)
        if found is not None:
            train, test = found
            return DataBundle("cifar10", train, test, f"cifar10: binary batches in {folder}")
    try:
        got = fetch("cifar10", data_dir / "cifar10", download=download)
        blob = got[Cifar10.ARCHIVE].read_bytes()
        train, test = Cifar10.parse_archive(blob), Cifar10.parse_archive(blob, train=False)
        return DataBundle("cifar10", train, test, "cifar10: canonical files (50,000 / 10,000)")
    except FetchError as e:
        logger.info("ddp-bench: CIFAR-10 unavailable (%s)", str(e).splitlines()[0])
    train, test = synthetic_cifar(seed)
    return DataBundle(
        "cifar10",
        train,
        test,
        f"cifar10: SYNTHETIC stand-in ({len(train):,} train / {len(test):,} test; class "
        "patterns + noise, not CIFAR-10)",
        synthetic=True,
    )
