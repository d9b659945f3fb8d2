"""CIFAR-10 from its binary batches: images ``(N, 3, 32, 32)`` in [0, 1], labels ``(N,)``."""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..._errors import DataError, ShapeError
from ._labeled import LabeledImages
from ._source import Source, read_source

PIXELS = 3 * 32 * 32
RECORD = 1 + PIXELS  # one label byte, then the red, green and blue planes, row-major
TRAIN_MEMBERS = tuple(f"cifar-10-batches-bin/data_batch_{i}.bin" for i in range(1, 6))
TEST_MEMBERS = ("cifar-10-batches-bin/test_batch.bin",)


class Cifar10(LabeledImages):
    """CIFAR-10: fields ``images: (N, 3, 32, 32)`` float32 and ``labels: (N,)`` int64 in 0..9."""

    NAME = "CIFAR-10"

    CLASSES = (
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    )
    ARCHIVE = "cifar-10-binary.tar.gz"

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        if images.dim() != 4 or tuple(images.shape[1:]) != (3, 32, 32):
            raise ShapeError(f"CIFAR-10 images must be (N, 3, 32, 32), got {tuple(images.shape)}")
        super().__init__(images, labels)

    @classmethod
    def parse(cls, batches: Sequence[Source]) -> Cifar10:
        """Parse binary batch files (``data_batch_1.bin`` ...), concatenated in the given order.

        Each is the file's bytes or its path (``str`` or ``Path``); for the downloaded
        ``cifar-10-binary.tar.gz`` use :meth:`parse_archive`.
        """
        if isinstance(batches, (bytes, bytearray, memoryview, str, os.PathLike)):
            hint = (
                "; for the .tar.gz archive use Cifar10.parse_archive(path)"
                if str(batches).endswith((".tar.gz", ".tgz"))
                else f"; wrap it in a list: Cifar10.parse([{type(batches).__name__}])"
            )
            raise DataError(
                f"Cifar10.parse takes a list of batch files (bytes or paths), got one "
                f"{type(batches).__name__}{hint}"
            )
        if not batches:
            raise DataError("Cifar10.parse got no batch; expected at least one batch file's bytes")
        batches = [read_source(b, f"CIFAR-10 batch {k}") for k, b in enumerate(batches)]
        records = []
        for k, data in enumerate(batches):
            size = len(data)
            if size == 0 or size % RECORD:
                raise DataError(
                    f"CIFAR-10 batch {k} is {size} bytes, not a whole number of {RECORD}-byte "
                    "records (truncated or foreign file)"
                )
            recs = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD)
            bad = np.flatnonzero(recs[:, 0] > 9)
            if bad.size:
                raise DataError(
                    f"CIFAR-10 batch {k}, record {int(bad[0])}: label {int(recs[bad[0], 0])} is "
                    "not a class index 0..9 (foreign file or wrong offset)"
                )
            records.append(recs)
        allrecs = np.concatenate(records) if len(records) > 1 else records[0]
        n = allrecs.shape[0]
        images = torch.from_numpy(allrecs[:, 1:].astype(np.float32).reshape(n, 3, 32, 32))
        images.div_(255.0)
        return cls(images, torch.from_numpy(allrecs[:, 0].astype(np.int64)))

    @classmethod
    def parse_archive(cls, tar_gz: Source, train: bool = True) -> Cifar10:
        """Parse the training (5 batches) or test split straight from ``cifar-10-binary.tar.gz``
        (its bytes or its path)."""
        tar_gz = read_source(tar_gz, "CIFAR-10 archive")
        wanted = TRAIN_MEMBERS if train else TEST_MEMBERS
        try:
            with tarfile.open(fileobj=io.BytesIO(tar_gz), mode="r:*") as tar:
                names = set(tar.getnames())
                missing = [m for m in wanted if m not in names]
                if missing:
                    raise DataError(
                        f"CIFAR-10 archive lacks {', '.join(missing)}; "
                        "is it cifar-10-binary.tar.gz?"
                    )
                blobs = []
                for m in wanted:
                    f = tar.extractfile(m)
                    if f is None:
                        raise DataError(f"CIFAR-10 archive member {m} is not a regular file")
                    blobs.append(f.read())
        except (tarfile.TarError, EOFError, OSError) as e:
            raise DataError(f"CIFAR-10 archive is not a readable tar.gz ({e})") from e
        return cls.parse(blobs)

    @classmethod
    def from_cache(cls, cache_dir: str | Path, train: bool = True, **fetch_options: Any) -> Cifar10:
        """:func:`fetch` ``"cifar10"`` into ``cache_dir`` (if needed) and parse one split.

        A file already in ``cache_dir`` must be the canonical archive (checked by SHA-256); for
        your own copy pass ``verify=False``, or call :meth:`parse_archive` with its path.
        """
        from ._fetch import fetch

        files = fetch("cifar10", cache_dir, **fetch_options)
        return cls.parse_archive(files[cls.ARCHIVE].read_bytes(), train=train)
