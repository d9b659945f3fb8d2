"""Resident mode: the whole dataset on the target device, gathered batch by batch on device.

An epoch is one host-drawn permutation sent to the device once, then per batch a slice of it
(a view) and one gather per field, on the device: no per-batch host work beyond launching the
gathers (on the CPU the gathers themselves are the work; see :mod:`._gather`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from .._errors import DataError
from ._batch import Batch
from ._dataset import BatchDataSet, TensorDataSet, check_fields
from ._gather import RowGather

LOAD_CHUNK_BYTES = 64 << 20
"""Bytes of samples read per ``get_batch`` while going resident (bounds the host-side peak)."""


class VariableShapeError(DataError):
    """Samples differ in shape or dtype, so they cannot be held as one ``(N, ...)`` tensor."""


class ResidentData:
    """One ``(N, ...)`` tensor per field, on the loader's device."""

    def __init__(self, tensors: tuple[Tensor, ...]) -> None:
        self.tensors = tensors
        self._gather = RowGather(tensors)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @classmethod
    def load(
        cls, source: BatchDataSet, probe: tuple[Tensor, ...], device: torch.device
    ) -> ResidentData:
        """Read every sample of ``source`` onto ``device``.

        ``probe`` is ``get_batch([0])``: it gives each field's dtype and per-sample shape. Tensors
        of a :class:`TensorDataSet` are used as they are (no copy when already on ``device``);
        other sources are read in chunks of about :data:`LOAD_CHUNK_BYTES` straight into
        preallocated device tensors. Raises :class:`torch.OutOfMemoryError` when it does not fit.
        """
        if isinstance(source, TensorDataSet):
            return cls(tuple(t.to(device) for t in source.tensors))
        n = len(source)
        per_sample = max(1, sum(t.nbytes for t in probe))
        chunk = max(1, min(n, LOAD_CHUNK_BYTES // per_sample))
        out = tuple(torch.empty((n, *t.shape[1:]), dtype=t.dtype, device=device) for t in probe)
        for start in range(0, n, chunk):
            idx = torch.arange(start, min(start + chunk, n), dtype=torch.int64)
            fields = check_fields(source.get_batch(idx), idx, len(probe))
            for k, (dst, src) in enumerate(zip(out, fields, strict=True)):
                if src.shape[1:] != dst.shape[1:] or src.dtype != dst.dtype:
                    raise VariableShapeError(
                        f"field {k} of samples {start}..{start + len(idx) - 1} is "
                        f"{tuple(src.shape[1:])} {src.dtype} but sample 0's is "
                        f"{tuple(dst.shape[1:])} {dst.dtype}"
                    )
                dst[start : start + len(idx)].copy_(src)
        return cls(out)

    def batches(
        self,
        order: Tensor,
        batch_size: int,
        num_batches: int,
        names: tuple[str, ...],
        index: dict[str, int],
    ) -> Iterator[Batch]:
        """The epoch's batches. ``order``: ``(M,)`` int64 sample indices, on the data's device."""
        gather = self._gather
        for b in range(num_batches):
            yield Batch._trusted(gather(order[b * batch_size : (b + 1) * batch_size]), names, index)
