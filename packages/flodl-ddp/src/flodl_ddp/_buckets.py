"""Collectives over many tensors at once: flatten into buckets, one collective per bucket.

Consecutive tensors of one device and dtype go into ~25 MB buckets (as ``DistributedDataParallel``),
so a collective's fixed latency (2-6 ms on gloo) is paid per bucket, not per tensor.
``wire_dtype=torch.bfloat16`` halves the bytes of float tensors on the wire (the sum is then
accumulated in bfloat16); integer tensors are never cast.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor

from flodl_core import ConfigError, check_int

from ._errors import DdpError

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
"""Bucket capacity, as ``DistributedDataParallel``'s default ``bucket_cap_mb=25``."""


def _wire(t: Tensor, wire_dtype: torch.dtype | None) -> torch.dtype:
    return wire_dtype if wire_dtype is not None and t.is_floating_point() else t.dtype


def plan_buckets(
    tensors: Sequence[Tensor],
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    wire_dtype: torch.dtype | None = None,
) -> list[list[int]]:
    """Group tensor indices into buckets: consecutive runs of one device and dtype, each at most
    ``bucket_bytes`` on the wire (a larger tensor gets a bucket of its own). The grouping depends
    only on the tensors' order, shapes, dtypes and devices, so replicas of one model on every rank
    make the same buckets and their collectives pair up."""
    check_int(bucket_bytes, "bucket_bytes", ge=1)
    buckets: list[list[int]] = []
    key: tuple[torch.device, torch.dtype] | None = None
    used = 0
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise ConfigError(f"tensor {i} is a {type(t).__name__}, expected a torch.Tensor")
        nbytes = t.numel() * _wire(t, wire_dtype).itemsize
        k = (t.device, t.dtype)
        if not buckets or k != key or used + nbytes > bucket_bytes:
            buckets.append([])
            key, used = k, 0
        buckets[-1].append(i)
        used += nbytes
    return buckets


@torch.no_grad()
def _unflatten_into(flat: Tensor, tensors: Sequence[Tensor]) -> None:
    for t, part in zip(tensors, flat.split([t.numel() for t in tensors]), strict=True):
        t.copy_(part.view(t.shape))


def _world(group: dist.ProcessGroup | None) -> int:
    if not dist.is_available() or not dist.is_initialized():
        raise DdpError(
            "no torch.distributed process group is initialised; call "
            "torch.distributed.init_process_group(...) first (or use Trainer, which does it)"
        )
    return dist.get_world_size(group)


def all_reduce_buckets(
    tensors: Sequence[Tensor],
    *,
    op: dist.ReduceOp.RedOpType | str = dist.ReduceOp.SUM,
    prescale: float | None = None,
    wire_dtype: torch.dtype | None = None,
    group: dist.ProcessGroup | None = None,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> None:
    """All-reduce every tensor in place, one collective per bucket (a :class:`DdpError` when no
    process group is initialised).

    Args:
        tensors: any shapes, the same list layout on every rank; each is overwritten.
        op: a ``torch.distributed.ReduceOp`` (``SUM``, ``MAX``, ...) or ``"avg"``: the mean
            over ranks (a sum divided by the world size: gloo has no ``AVG``).
        prescale: multiply each rank's values by this before the collective (e.g. a weight
            ``count/total`` for a weighted sum); applied before the cast to ``wire_dtype``.
        wire_dtype: e.g. ``torch.bfloat16`` to halve the bytes of float32 tensors.
        group: the process group (default: the world).
        bucket_bytes: bucket capacity on the wire.
    """
    world = _world(group)
    average = isinstance(op, str)
    if average and op != "avg":
        raise ConfigError(f"op must be a torch.distributed.ReduceOp or 'avg', got {op!r}")
    red = dist.ReduceOp.SUM if average else op
    for idx in plan_buckets(tensors, bucket_bytes, wire_dtype):
        members = [tensors[i] for i in idx]
        flat = torch.cat([t.detach().reshape(-1) for t in members])
        if prescale is not None:
            flat = flat * prescale if flat.is_floating_point() else flat
        wire = _wire(members[0], wire_dtype)
        buf = flat if flat.dtype == wire else flat.to(wire)
        dist.all_reduce(buf, op=red, group=group)
        out = buf if buf.dtype == flat.dtype else buf.to(flat.dtype)
        if average:
            # integers floor-divide (in place a float would be truncated anyway): dtype kept
            out = out / world if out.is_floating_point() else out // world
        _unflatten_into(out, members)


def broadcast_buckets(
    tensors: Sequence[Tensor],
    *,
    src: int = 0,
    group: dist.ProcessGroup | None = None,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> None:
    """Overwrite every tensor in place with rank ``src``'s value, one broadcast per bucket;
    always exact (no wire dtype): it is how replicas start from identical weights."""
    _world(group)
    for idx in plan_buckets(tensors, bucket_bytes):
        members = [tensors[i] for i in idx]
        flat = torch.cat([t.detach().reshape(-1) for t in members])
        dist.broadcast(flat, src=src, group=group)
        _unflatten_into(flat, members)
