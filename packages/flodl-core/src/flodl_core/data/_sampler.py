"""Epoch orders and their partitions.

Epoch ``k`` visits the samples in ``randperm(N)`` drawn from a generator seeded with
``seed + k`` (or ``0..N-1`` without shuffling). The permutation is drawn on the host, so every
device and every rank of a distributed run computes the *same* order from the same seed; each rank
then reads its own contiguous part of it (:func:`even_shard`, :func:`weighted_shards`), which
keeps the parts disjoint and their union the whole epoch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from .._checks import check_finite, check_int
from .._errors import ConfigError


def _check_int(name: str, value: object, low: int) -> int:
    return check_int(value, name, ge=low)


def epoch_permutation(n: int, seed: int, epoch: int, shuffle: bool = True) -> Tensor:
    """Epoch ``epoch``'s order: ``(n,)`` int64 on the CPU, reproducible from ``seed + epoch``."""
    _check_int("n", n, 0)
    _check_int("seed", seed, 0)
    _check_int("epoch", epoch, 0)
    if not shuffle:
        return torch.arange(n, dtype=torch.int64)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed + epoch)
    return torch.randperm(n, generator=gen, dtype=torch.int64)


def even_shard(n: int, rank: int, world_size: int) -> range:
    """Rank ``rank``'s part of an ``n``-long epoch order split in ``world_size`` equal parts.

    Parts are contiguous and all of length ``n // world_size``; the last ``n % world_size``
    positions are left out so every rank runs the same number of steps (a rank with one more
    batch would wait forever in a collective).
    """
    _check_int("n", n, 0)  # a negative n would give an empty, reversed range silently
    _check_int("world_size", world_size, 1)
    _check_int("rank", rank, 0)
    if rank >= world_size:
        raise ConfigError(f"rank {rank} is out of range for world_size {world_size}")
    per = n // world_size
    return range(rank * per, (rank + 1) * per)


def weighted_shards(n: int, weights: Sequence[float]) -> list[range]:
    """Split positions ``0..n-1`` into contiguous ranges proportional to ``weights``.

    For heterogeneous ranks: a device twice as fast gets a part twice as long. Sizes are rounded by
    largest remainder, so they sum to ``n`` exactly; ties go to the earlier weight.
    """
    _check_int("n", n, 0)
    if not weights:
        raise ConfigError("weighted_shards needs at least one weight")
    for i, w in enumerate(weights):
        check_finite(w, f"weight {i}", ge=0, where="weighted_shards")
    total = float(sum(weights))
    if total <= 0:
        raise ConfigError(f"weights {list(weights)} sum to 0; at least one must be positive")
    exact = [n * w / total for w in weights]
    sizes = [math.floor(x) for x in exact]
    short = n - sum(sizes)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in by_remainder[:short]:
        sizes[i] += 1
    out: list[range] = []
    start = 0
    for size in sizes:
        out.append(range(start, start + size))
        start += size
    return out
