"""Row gathers ``t[idx]`` over fixed tensors, tuned for batch-sized index sets.

On the CPU, ``index_select`` splits a gather of more than ~32k elements over the intra-op thread
pool. A batch gather is far too small to pay for that: on a busy machine one preempted OpenMP
thread stalls the whole region for a scheduler tick, and an epoch of ~1000 gathers went from 30 ms
to over a second in our measurements. NumPy's ``take`` copies the same rows on one thread, as fast
as ``index_select`` on an idle machine and unaffected by a loaded one, and the result is handed
back to torch without a copy. Dtypes NumPy lacks (``bfloat16`` ...) and device tensors use
``index_select``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor


def _numpy_view(t: Tensor) -> np.ndarray | None:
    if t.device.type != "cpu":
        return None
    try:
        return t.detach().numpy()
    except (RuntimeError, TypeError):  # bfloat16, conjugate/negative views, ...
        return None


class RowGather:
    """``gather(idx)`` is ``tuple(t.index_select(0, idx) for t in tensors)``, computed fast."""

    __slots__ = ("_any_numpy", "_tensors", "_views")

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        self._tensors = tuple(tensors)
        self._views = tuple(_numpy_view(t) for t in self._tensors)
        self._any_numpy = any(v is not None for v in self._views)

    def __call__(self, idx: Tensor) -> tuple[Tensor, ...]:
        """``idx``: ``(B,)`` int64 on the tensors' device; returns one ``(B, ...)`` per tensor."""
        if idx.device.type != "cpu" or not self._any_numpy:
            return tuple(t.index_select(0, idx) for t in self._tensors)
        rows = idx.numpy()
        return tuple(
            torch.from_numpy(np.take(v, rows, axis=0)) if v is not None else t.index_select(0, idx)
            for t, v in zip(self._tensors, self._views, strict=True)
        )
