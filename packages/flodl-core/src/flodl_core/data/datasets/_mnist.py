"""MNIST from its IDX files (gzip or raw): images ``(N, 1, R, C)`` in [0, 1], labels ``(N,)``."""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from ..._errors import DataError, ShapeError
from ._labeled import LabeledImages
from ._source import Source, read_source

IMAGES_MAGIC = 2051  # 0x00000803: unsigned bytes, 3 dimensions
LABELS_MAGIC = 2049  # 0x00000801: unsigned bytes, 1 dimension


def _gunzip(data: bytes, what: str) -> bytes:
    if data[:2] != b"\x1f\x8b":  # not gzip: take it as the raw IDX file
        return bytes(data)
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(f"MNIST {what}: not a valid gzip stream ({e})") from e


def read_idx(data: bytes, magic: int, ndim: int, what: str) -> tuple[tuple[int, ...], np.ndarray]:
    """Dims and uint8 payload of an IDX file whose magic must be ``magic`` (big-endian u32s)."""
    raw = _gunzip(data, what)
    header = 4 * (1 + ndim)
    # The magic first: it tells a swapped or foreign file apart from a truncated one.
    if len(raw) >= 4 and (found := struct.unpack(">I", raw[:4])[0]) != magic:
        raise DataError(f"MNIST {what}: magic number is {found}, expected {magic}")
    if len(raw) < header:
        raise DataError(
            f"MNIST {what}: {len(raw)} bytes is shorter than the {header}-byte IDX header"
        )
    dims = struct.unpack(f">{ndim}I", raw[4:header])
    expected = int(np.prod(dims))
    got = len(raw) - header
    if got != expected:
        shape = "x".join(map(str, dims))
        raise DataError(
            f"MNIST {what}: header says {shape} = {expected} bytes of data but the file holds "
            f"{got} (truncated or foreign file)"
        )
    return tuple(dims), np.frombuffer(raw, dtype=np.uint8, offset=header)


class Mnist(LabeledImages):
    """MNIST (or any IDX digits set): fields ``images: (N, 1, R, C)`` float32, ``labels: (N,)``."""

    NAME = "MNIST"

    FILES: ClassVar[dict[bool, tuple[str, str]]] = {
        True: ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
        False: ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
    }
    """Canonical file names by ``train``."""

    def __init__(self, images: Tensor, labels: Tensor) -> None:
        if images.dim() != 4 or images.shape[1] != 1:
            raise ShapeError(f"MNIST images must be (N, 1, R, C), got {tuple(images.shape)}")
        super().__init__(images, labels)

    @classmethod
    def parse(cls, images: Source, labels: Source) -> Mnist:
        """Parse the images file (magic 2051) and the labels file (magic 2049).

        Each is the file's bytes or its path (``str`` or ``Path``), gzip-compressed (``.gz``, as
        downloaded) or unpacked: ``Mnist.parse("train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz")``.
        """
        images_raw = read_source(images, "MNIST images")
        labels_raw = read_source(labels, "MNIST labels")
        (n, rows, cols), pixels = read_idx(images_raw, IMAGES_MAGIC, 3, "images")
        (m,), labels_u8 = read_idx(labels_raw, LABELS_MAGIC, 1, "labels")
        if n != m:
            raise DataError(f"MNIST: the images file holds {n} images but the labels file {m}")
        images_t = torch.from_numpy(pixels.astype(np.float32).reshape(n, 1, rows, cols))
        images_t.div_(255.0)
        return cls(images_t, torch.from_numpy(labels_u8.astype(np.int64)))

    @classmethod
    def from_cache(cls, cache_dir: str | Path, train: bool = True, **fetch_options: Any) -> Mnist:
        """:func:`fetch` ``"mnist"`` into ``cache_dir`` (if needed) and parse one split.

        Files already in ``cache_dir`` must be the canonical ones (checked by SHA-256); for
        your own files under the canonical names pass ``verify=False``, or call
        :meth:`parse` with their paths.
        """
        from ._fetch import fetch

        files = fetch("mnist", cache_dir, **fetch_options)
        images, labels = cls.FILES[train]
        return cls.parse(files[images].read_bytes(), files[labels].read_bytes())
