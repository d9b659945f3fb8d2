from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from flodl_core import DataError, ShapeError
from flodl_core.data.datasets import Cifar10


def records(labels: list[int], seed: int = 0) -> tuple[bytes, np.ndarray]:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 256, (len(labels), 3072), dtype=np.uint8)
    recs = np.concatenate([np.array(labels, dtype=np.uint8)[:, None], pixels], axis=1)
    return recs.tobytes(), pixels


def archive(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_parse_is_channel_major() -> None:
    data, pixels = records([3, 9, 0])
    ds = Cifar10.parse([data])
    assert ds.images.shape == (3, 3, 32, 32) and ds.images.dtype == torch.float32
    assert ds.labels.tolist() == [3, 9, 0] and ds.labels.dtype == torch.int64
    # Record byte 1 + c*1024 + y*32 + x is channel c, row y, column x.
    for c, y, x in [(0, 0, 0), (1, 5, 7), (2, 31, 31)]:
        expected = pixels[1, c * 1024 + y * 32 + x] / 255.0
        assert float(ds.images[1, c, y, x]) == pytest.approx(expected)


def test_batches_concatenate_in_order() -> None:
    a, _ = records([1, 2], seed=1)
    b, _ = records([3], seed=2)
    ds = Cifar10.parse([a, b])
    assert len(ds) == 3 and ds.labels.tolist() == [1, 2, 3]
    torch.testing.assert_close(ds.images[2], Cifar10.parse([b]).images[0], rtol=0, atol=0)


def test_truncated_record() -> None:
    data, _ = records([1, 2])
    with pytest.raises(DataError, match="batch 1 is 6145 bytes, not a whole number of 3073"):
        Cifar10.parse([data, data[:-1]])
    with pytest.raises(DataError, match="batch 0 is 0 bytes"):
        Cifar10.parse([b""])


def test_bad_arguments_and_labels() -> None:
    data, _ = records([1])
    with pytest.raises(DataError, match="got no batch"):
        Cifar10.parse([])
    with pytest.raises(DataError, match="takes a list of batch files"):
        Cifar10.parse(data)  # type: ignore[arg-type]
    bad = bytes([200]) + data[1:]
    with pytest.raises(DataError, match="batch 0, record 0: label 200 is not a class index"):
        Cifar10.parse([bad])


def test_parse_archive_splits() -> None:
    members = {}
    for i in range(1, 6):
        members[f"cifar-10-batches-bin/data_batch_{i}.bin"] = records([i, i], seed=i)[0]
    members["cifar-10-batches-bin/test_batch.bin"] = records([0, 9, 8], seed=9)[0]
    blob = archive(members)
    train = Cifar10.parse_archive(blob)
    assert train.labels.tolist() == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    test = Cifar10.parse_archive(blob, train=False)
    assert test.labels.tolist() == [0, 9, 8]


def test_parse_archive_errors() -> None:
    blob = archive({"cifar-10-batches-bin/test_batch.bin": records([1])[0]})
    with pytest.raises(DataError, match=r"archive lacks cifar-10-batches-bin/data_batch_1\.bin"):
        Cifar10.parse_archive(blob)
    with pytest.raises(DataError, match=r"not a readable tar\.gz"):
        Cifar10.parse_archive(b"not an archive at all")


def test_constructor_checks_shapes() -> None:
    with pytest.raises(ShapeError, match=r"images must be \(N, 3, 32, 32\), got \(2, 1, 32, 32\)"):
        Cifar10(torch.zeros(2, 1, 32, 32), torch.zeros(2, dtype=torch.int64))
    with pytest.raises(ShapeError, match=r"labels must be \(N,\)"):
        Cifar10(torch.zeros(2, 3, 32, 32), torch.zeros(2, 2, dtype=torch.int64))


def test_paths_are_accepted(tmp_path: Path) -> None:
    batch = tmp_path / "data_batch_1.bin"
    batch.write_bytes(records([3, 4])[0])
    ds = Cifar10.parse([batch, str(batch)])
    assert ds.labels.tolist() == [3, 4, 3, 4]
    assert ds.field_names == ("image", "label") and ds[0][0].shape == (3, 32, 32)
    members = {f"cifar-10-batches-bin/data_batch_{i}.bin": records([i])[0] for i in range(1, 6)}
    members["cifar-10-batches-bin/test_batch.bin"] = records([0])[0]
    tar = tmp_path / "cifar-10-binary.tar.gz"
    tar.write_bytes(archive(members))
    assert Cifar10.parse_archive(tar, train=False).labels.tolist() == [0]
    with pytest.raises(DataError, match=r"for the \.tar\.gz archive use Cifar10\.parse_archive"):
        Cifar10.parse(tar)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=r"wrap it in a list"):
        Cifar10.parse(batch)  # type: ignore[arg-type]
