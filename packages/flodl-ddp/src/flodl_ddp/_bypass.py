"""The bypass tier: plain functions over a process group the user initialised.

For people who keep their own loop and their own launcher (``torchrun``) and only want the
collectives, bucketed::

    dist.init_process_group("gloo")
    verify_replicas(model, values=False)    # the same architecture on every rank
    sync_params(model)                      # every rank starts from rank 0's weights
    for batch in my_shard:
        loss_fn(model(batch)).backward()
        all_reduce_gradients(model)         # mean over ranks
        optimizer.step(); optimizer.zero_grad()
    sync_buffers(model)                     # e.g. BatchNorm running stats from rank 0

``weighted_all_reduce_gradients(model, count)`` weighs each rank by its batch count (ranks of
unequal speed); ``verify_replicas(model)`` checks at any point that the replicas agree bit for bit.
"""

from __future__ import annotations

import zlib

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed import ProcessGroup

from flodl_core import check_finite

from ._buckets import all_reduce_buckets, broadcast_buckets
from ._errors import DdpError


def _grads(model: nn.Module) -> list[Tensor]:
    """The gradient of every trainable parameter, in ``parameters()`` order; an unused one gets
    zeros, so every rank reduces the same bucket layout."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    return [p.grad for p in params]


def sync_params(model: nn.Module, *, src: int = 0, group: ProcessGroup | None = None) -> None:
    """Broadcast parameters and buffers from rank ``src`` so every replica is identical."""
    broadcast_buckets([p.data for p in model.parameters()], src=src, group=group)
    sync_buffers(model, src=src, group=group)


def sync_buffers(model: nn.Module, *, src: int = 0, group: ProcessGroup | None = None) -> None:
    """Broadcast buffers (BatchNorm running statistics ...) from rank ``src``; not averaged."""
    if buffers := list(model.buffers()):
        broadcast_buckets(buffers, src=src, group=group)


def all_reduce_gradients(
    model: nn.Module, *, wire_dtype: torch.dtype | None = None, group: ProcessGroup | None = None
) -> None:
    """Replace every gradient with its mean over the ranks: ``g = (1/W) Σ_r g_r``."""
    all_reduce_buckets(_grads(model), op="avg", wire_dtype=wire_dtype, group=group)


def weighted_all_reduce_gradients(
    model: nn.Module,
    count: int | float,
    *,
    wire_dtype: torch.dtype | None = None,
    group: ProcessGroup | None = None,
) -> None:
    """Replace every gradient with the count-weighted sum ``g = Σ_r (count_r / Σ count) · g_r``:
    the mean over every batch of every rank when each rank's gradient is the mean over its own.

    Args:
        count: this rank's weight, usually the number of batches (or samples) it ran since the
            last reduction; 0 is allowed (the rank contributes nothing).

    Raises:
        DdpError: the counts of all ranks sum to 0 (raised on every rank alike, so none hangs).
        ValueError (ConfigError): ``count`` is negative or not a finite number.
    """
    count = check_finite(count, "count", ge=0)
    grads = _grads(model)
    total_t = torch.tensor([count], dtype=torch.float64, device=grads[0].device if grads else None)
    dist.all_reduce(total_t, group=group)
    total = float(total_t.item())
    if total <= 0:
        raise DdpError(
            f"weighted_all_reduce_gradients: the counts of all ranks sum to {total:g}; "
            "at least one rank must report a count > 0"
        )
    all_reduce_buckets(grads, prescale=count / total, wire_dtype=wire_dtype, group=group)


def _crc(t: Tensor) -> int:
    flat = t.detach().contiguous().reshape(-1).cpu()
    return zlib.crc32(flat.view(torch.uint8).numpy()) if flat.numel() else 0


def _gather(values: list[int], group: ProcessGroup | None) -> list[list[int]]:
    """Every rank's ``values`` (the same length on every rank), in rank order."""
    mine = torch.tensor(values, dtype=torch.int64)
    mine = mine.cuda() if dist.get_backend(group) == "nccl" else mine
    gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(gathered, mine, group=group)
    return [g.tolist() for g in gathered]


def verify_replicas(
    model: nn.Module, *, values: bool = True, group: ProcessGroup | None = None
) -> None:
    """Check that every rank holds the same replica: the same architecture (parameter and
    buffer names, shapes, dtypes) and, with ``values``, the same values bit for bit (CRC32 of
    each tensor's bytes; ``values=False`` before :func:`sync_params`). Call it before the first
    bucketed collective (mismatched buckets would pair up or hang) and after :func:`sync_params`
    (replicas that start apart never meet again). A collective of every rank of ``group``.

    Raises:
        DdpError: naming the first rank whose replica differs from rank 0's, and whether its
            architecture or its values differ (with the first tensor).
    """
    if not dist.is_available() or not dist.is_initialized():
        raise DdpError("no torch.distributed process group is initialised")
    tensors = [*model.named_parameters(), *model.named_buffers()]  # the collectives' order
    shapes = zlib.crc32(";".join(f"{n}:{tuple(t.shape)}:{t.dtype}" for n, t in tensors).encode())
    crcs = [_crc(t) for _, t in tensors] if values else []
    total = zlib.crc32(b"".join(c.to_bytes(4, "little") for c in crcs))
    # tensor count, parameter elements, CRC32 of the names, shapes and dtypes; of the values
    layout = [len(tensors), sum(t.numel() for t in model.parameters()), shapes]
    gathered = _gather([*layout, total], group)
    ref = gathered[0]
    for r, got in enumerate(gathered):
        if got[:3] != ref[:3]:
            raise DdpError(
                f"the replica on rank {r} differs from rank 0's in its architecture: {got[0]} vs "
                f"{ref[0]} tensors, {got[1]} vs {ref[1]} parameter elements (or different names, "
                "shapes or dtypes); every rank must build the same model",
                rank=r,
            )
    differ = [r for r, got in enumerate(gathered) if got[3] != ref[3]]
    if not differ:
        return
    per_tensor = _gather(crcs, group)  # every rank saw the same difference: all call it
    r = differ[0]
    pairs = zip(tensors, per_tensor[r], per_tensor[0], strict=True)
    first = next((name for (name, _), a, b in pairs if a != b), "?")
    raise DdpError(
        f"the replica on rank {r} differs from rank 0's in its values (same architecture), "
        f"first in {first!r}; every rank must start from the same weights: call "
        "sync_params(model) after building the model (and sync_buffers(model) after changing "
        "buffers on one rank)",
        rank=r,
    )
