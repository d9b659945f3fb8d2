from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from flodl_core import DataError, DataLoader, FetchError, ShapeError
from flodl_core.data.datasets import Mnist


def idx_images(pixels: np.ndarray, magic: int = 2051) -> bytes:
    n, rows, cols = pixels.shape
    return struct.pack(">4I", magic, n, rows, cols) + pixels.astype(np.uint8).tobytes()


def idx_labels(labels: np.ndarray, magic: int = 2049) -> bytes:
    return struct.pack(">2I", magic, len(labels)) + labels.astype(np.uint8).tobytes()


@pytest.fixture
def raw() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 10, 12)


def test_parse_gzip_idx(raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    ds = Mnist.parse(gzip.compress(idx_images(pixels)), gzip.compress(idx_labels(labels)))
    assert len(ds) == 12
    assert ds.images.shape == (12, 1, 28, 28) and ds.images.dtype == torch.float32
    assert ds.labels.dtype == torch.int64 and ds.labels.tolist() == labels.tolist()
    expected = torch.from_numpy(pixels.astype(np.float32) / 255.0).unsqueeze(1)
    torch.testing.assert_close(ds.images, expected, rtol=0, atol=1e-7)
    assert float(ds.images.max()) <= 1.0


def test_raw_idx_and_other_sizes_parse() -> None:
    pixels = np.arange(2 * 3 * 5).reshape(2, 3, 5)
    ds = Mnist.parse(idx_images(pixels), idx_labels(np.array([7, 1])))
    assert ds.images.shape == (2, 1, 3, 5) and ds.labels.tolist() == [7, 1]
    assert float(ds.images[1, 0, 2, 4]) == pytest.approx(29 / 255)


def test_feeds_a_loader(raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    ds = Mnist.parse(idx_images(pixels), idx_labels(labels))
    loader = DataLoader(ds, batch_size=4, names=["image", "label"])
    batch = next(iter(loader))
    assert loader.is_resident and batch["image"].shape == (4, 1, 28, 28)


def test_bad_magic(raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    with pytest.raises(DataError, match="images: magic number is 2049, expected 2051"):
        Mnist.parse(idx_labels(labels), idx_labels(labels))
    with pytest.raises(DataError, match="labels: magic number is 2051, expected 2049"):
        Mnist.parse(idx_images(pixels), idx_images(pixels))
    # Swapped files shorter than an image header still report the magic, not a truncation.
    small = idx_labels(np.array([5, 0, 4]))
    with pytest.raises(DataError, match="images: magic number is 2049, expected 2051"):
        Mnist.parse(small, small)


def test_truncated_files(raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    images, lab = idx_images(pixels), idx_labels(labels)
    with pytest.raises(DataError, match=r"header says 12x28x28 = 9408 bytes .* holds 9407"):
        Mnist.parse(images[:-1], lab)
    with pytest.raises(DataError, match=r"labels: header says 12 = 12 bytes .* holds 11"):
        Mnist.parse(images, gzip.compress(lab[:-1]))
    with pytest.raises(DataError, match="shorter than the 16-byte IDX header"):
        Mnist.parse(images[:10], lab)


def test_count_mismatch_and_bad_gzip(raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    with pytest.raises(DataError, match="holds 12 images but the labels file 11"):
        Mnist.parse(idx_images(pixels), idx_labels(labels[:11]))
    broken = gzip.compress(idx_images(pixels))[:40]
    with pytest.raises(DataError, match="images: not a valid gzip stream"):
        Mnist.parse(broken, idx_labels(labels))


def test_constructor_checks_shapes() -> None:
    with pytest.raises(ShapeError, match=r"images must be \(N, 1, R, C\), got \(2, 28, 28\)"):
        Mnist(torch.zeros(2, 28, 28), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ShapeError, match=r"labels must be \(N,\), got \(2, 1\)"):
        Mnist(torch.zeros(2, 1, 28, 28), torch.zeros(2, 1, dtype=torch.int64))


def test_parse_takes_paths_gz_or_raw(tmp_path: Path, raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    gz_images = tmp_path / "train-images-idx3-ubyte.gz"
    gz_images.write_bytes(gzip.compress(idx_images(pixels)))
    raw_labels = tmp_path / "train-labels-idx1-ubyte"
    raw_labels.write_bytes(idx_labels(labels))
    by_path = Mnist.parse(gz_images, str(raw_labels))
    by_bytes = Mnist.parse(idx_images(pixels), idx_labels(labels))
    assert torch.equal(by_path.images, by_bytes.images)
    assert by_path.labels.tolist() == labels.tolist()
    with pytest.raises(DataError, match=r"MNIST images: no file at '.*nothere.gz'"):
        Mnist.parse(tmp_path / "nothere.gz", raw_labels)
    with pytest.raises(DataError, match=r"expected the file's bytes or a path .* got int"):
        Mnist.parse(3, raw_labels)  # type: ignore[arg-type]


def test_fields_are_named_and_indexable(raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    ds = Mnist.parse(idx_images(pixels), idx_labels(labels))
    assert repr(ds) == "Mnist(12 samples; image: (1, 28, 28) float32, label: () int64)"
    image, label = ds[3]
    assert image.shape == (1, 28, 28) and int(label) == labels[3]
    assert torch.equal(ds[-1][0], ds.images[11])
    with pytest.raises(IndexError, match="index 12 is out of range for 12 samples"):
        ds[12]
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch.names == ("image", "label") and batch["label"].shape == (4,)
    # torch's own DataLoader takes it as a map-style dataset.
    images, labels_t = next(iter(torch.utils.data.DataLoader(ds, batch_size=5)))
    assert images.shape == (5, 1, 28, 28) and labels_t.tolist() == labels[:5].tolist()


def test_from_cache_with_own_files(tmp_path: Path, raw: tuple[np.ndarray, np.ndarray]) -> None:
    pixels, labels = raw
    for name, data in (
        ("train-images-idx3-ubyte.gz", gzip.compress(idx_images(pixels))),
        ("train-labels-idx1-ubyte.gz", gzip.compress(idx_labels(labels))),
        ("t10k-images-idx3-ubyte.gz", gzip.compress(idx_images(pixels[:2]))),
        ("t10k-labels-idx1-ubyte.gz", gzip.compress(idx_labels(labels[:2]))),
    ):
        (tmp_path / name).write_bytes(data)
    with pytest.raises(FetchError, match="pass verify=False to skip the checksum"):
        Mnist.from_cache(tmp_path, download=False)
    ds = Mnist.from_cache(tmp_path, train=False, download=False, verify=False)
    assert len(ds) == 2
