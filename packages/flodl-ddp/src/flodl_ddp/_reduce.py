"""How the ranks sum their replicas: a :class:`Reducer` makes ``out[seg] = Σ_r w_r · x_r[seg]``
over the averager's flat buffers (:mod:`._average`), identical on every rank: an all-reduce of
the default group, one shared-memory file on one host, torchft's all-reduce
(:class:`~flodl_ddp._ft.FtReducer`), or nothing in a world of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.distributed as dist
from torch import Tensor

from ._shm import SharedSlots


@dataclass(frozen=True)
class Segment:
    """``[start, stop)`` of a flat buffer, the weight of every rank there, and whether it may
    travel in the reducer's wire dtype (parameters may; buffers travel exact)."""

    start: int
    stop: int
    weights: tuple[float, ...]
    wire: bool = True


class Reducer(Protocol):
    """Sums the ranks' flat buffers. ``filled_scaled``: each rank writes ``w_me · x_me`` into
    :meth:`target` before :meth:`reduce` (``False``: its raw ``x_me``, before the arrival)."""

    filled_scaled: bool

    def target(self, k: int, out: Tensor) -> Tensor:
        """Where this rank puts its values of flat buffer ``k`` (``out`` itself, or its slot)."""

    def reduce(self, k: int, out: Tensor, segments: Sequence[Segment], rank: int) -> int:
        """``out := Σ_r`` of every rank's target, weighted per segment; returns the bytes this
        rank handed to the collective or wrote to shared memory."""


class InPlace:
    """The base of the reducers whose ranks fill ``out`` itself, scaled."""

    filled_scaled = True

    def target(self, k: int, out: Tensor) -> Tensor:
        return out


class LocalReducer(InPlace):
    """A world of one: nothing to sum."""

    def reduce(self, k: int, out: Tensor, segments: Sequence[Segment], rank: int) -> int:
        return 0


class GroupReducer(InPlace):
    """All-reduce over ``torch.distributed``'s default group (or ``group``); ``wire``: the dtype
    the segments that allow it travel in (``bfloat16``: half the bytes)."""

    def __init__(self, wire: torch.dtype | None = None, group: dist.ProcessGroup | None = None):
        self.wire, self.group = wire, group

    def reduce(self, k: int, out: Tensor, segments: Sequence[Segment], rank: int) -> int:
        if out.numel() == 0:
            return 0
        if self.wire is None or not out.is_floating_point():
            dist.all_reduce(out, group=self.group)
            return out.numel() * out.element_size()
        sent = 0
        for s in segments:
            part = out[s.start : s.stop]
            send = part.to(self.wire) if s.wire else part
            dist.all_reduce(send, group=self.group)
            if s.wire:
                part.copy_(send)
            sent += send.numel() * send.element_size()
        return sent


class SharedReducer:
    """Sums the slots of a shared-memory file (:meth:`SharedSlots.open`) in rank order, so every
    rank computes the same bits; no gloo call at all."""

    filled_scaled = False

    def __init__(self, slots: SharedSlots, rank: int) -> None:
        self.slots, self.rank = slots, rank

    def target(self, k: int, out: Tensor) -> Tensor:
        return self.slots.slots[self.rank][k]

    def reduce(self, k: int, out: Tensor, segments: Sequence[Segment], rank: int) -> int:
        # One pass per slot, the first scaled into place, the others added with their weight: no
        # scratch copy of the model (each pass over the cold slots costs ~1 ms per 7 MB).
        for seg in segments:
            dst = out[seg.start : seg.stop]
            for r, row in enumerate(self.slots.slots):
                src = row[k][seg.start : seg.stop]
                if r == 0:
                    torch.mul(src, float(seg.weights[0]), out=dst)
                else:
                    dst.add_(src, alpha=float(seg.weights[r]))
        mine = self.slots.slots[self.rank][k]
        return mine.numel() * mine.element_size()
