"""Which samples each rank reads in an epoch, computed alike on every rank without talking.

Epoch ``k``'s order is one seeded global permutation (drawn from ``seed + k``) cut into
consecutive slices, one per rank, sized by the ranks' shares: within an epoch every sample is
seen exactly once. The slices are positions in that order, as
:meth:`flodl_core.DataLoader.shard_range` takes them (a loader with the same ``seed``)::

    plan = partition(len(ds), [2.0, 1.0], epoch=3, seed=42)
    loader.shard_range(plan[rank].start, plan[rank].stop).epoch(3)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from torch import Tensor

from flodl_core import ConfigError, check_int
from flodl_core.data import epoch_permutation


@dataclass(frozen=True)
class Partition(Sequence[range]):
    """One epoch's plan: ``plan[r]`` is rank ``r``'s slice of positions in the epoch order. The
    fields are :func:`partition`'s arguments (``n_samples``: ``N``) and ``slices``: one ``range``
    of positions per rank, consecutive, together ``range(N)``."""

    n_samples: int
    slices: tuple[range, ...]
    epoch: int
    seed: int
    shuffle: bool = True

    @overload
    def __getitem__(self, index: int) -> range: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[range]: ...
    def __getitem__(self, index: int | slice) -> range | Sequence[range]:
        return self.slices[index]

    def __len__(self) -> int:
        return len(self.slices)

    @property
    def sizes(self) -> list[int]:
        """Samples per rank; they sum to ``n_samples``."""
        return [len(s) for s in self.slices]

    def order(self) -> Tensor:
        """The epoch's global order: ``(N,)`` int64 sample indices, identical on every rank."""
        return epoch_permutation(self.n_samples, self.seed, self.epoch, self.shuffle)

    def indices(self, rank: int) -> Tensor:
        """Rank ``rank``'s sample indices for the epoch, in order: ``(sizes[rank],)`` int64."""
        s = self.slices[check_int(rank, "rank", ge=0, le=len(self) - 1)]
        return self.order()[s.start : s.stop]


def _shares(ranks: int | Sequence[float]) -> list[float]:
    if isinstance(ranks, int) and not isinstance(ranks, bool):
        if ranks < 1:
            raise ConfigError(f"world_size must be >= 1, got {ranks}")
        return [1.0] * ranks
    if isinstance(ranks, (str, bytes)) or not isinstance(ranks, Sequence):
        raise ConfigError(
            f"partition needs a world size (int >= 1) or a sequence of per-rank shares, "
            f"got {type(ranks).__name__} {ranks!r}"
        )
    if not ranks:
        raise ConfigError("shares is empty; give one share per rank")
    for i, w in enumerate(ranks):
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not math.isfinite(w) or w < 0:
            raise ConfigError(f"share of rank {i} is {w!r}; expected a finite number >= 0")
    out = [float(w) for w in ranks]
    if sum(out) <= 0:
        raise ConfigError(f"shares {list(ranks)} sum to 0; at least one rank needs a share > 0")
    return out


def split_sizes(n_samples: int, ranks: int | Sequence[float]) -> list[int]:
    """Per-rank slice sizes of ``n_samples`` in proportion to the shares, by largest remainder
    (ties to the lower rank): they sum to ``n_samples``, each within one of its exact share. A
    positive share never gets 0 (it takes one sample from the largest slice); a share of 0 (a
    rank that left) gets nothing. A :class:`ConfigError` for bad shares, or fewer samples than
    ranks with a positive share."""
    check_int(n_samples, "n_samples", ge=0)
    shares = _shares(ranks)
    active = [i for i, w in enumerate(shares) if w > 0]
    if n_samples < len(active):
        raise ConfigError(
            f"n_samples={n_samples} is smaller than the {len(active)} ranks that need data; "
            "use a larger dataset or fewer ranks"
        )
    total = sum(shares)
    exact = [n_samples * w / total for w in shares]
    sizes = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: (-(exact[i] - sizes[i]), i))
    for i in by_remainder[: n_samples - sum(sizes)]:
        sizes[i] += 1
    for i in (i for i in active if sizes[i] == 0):
        donor = max(range(len(sizes)), key=lambda j: (sizes[j], -j))
        sizes[donor], sizes[i] = sizes[donor] - 1, 1
    return sizes


def partition(
    n_samples: int,
    ranks: int | Sequence[float],
    *,
    epoch: int,
    seed: int = 42,
    shuffle: bool = True,
) -> Partition:
    """Epoch ``epoch``'s plan: consecutive slices of one seeded global order, one per rank
    (``plan.indices(r)``: rank ``r``'s sample indices); a bad argument is a :class:`ConfigError`.

    Args:
        n_samples: dataset length ``N`` (>= the number of ranks with a positive share).
        ranks: the world size (equal slices) or one share per rank (any positive scale, e.g.
            ElChe's ``throughput_shares()``); sizes follow :func:`split_sizes`.
        epoch: the epoch number (>= 0); the order is drawn from ``seed + epoch``.
        seed: the run's base seed (>= 0), the same on every rank.
        shuffle: ``False`` keeps the order ``0..N-1``.
    """
    check_int(epoch, "epoch", ge=0)
    check_int(seed, "seed", ge=0)
    ends = list(itertools.accumulate(split_sizes(n_samples, ranks), initial=0))
    slices = tuple(range(a, b) for a, b in itertools.pairwise(ends))
    return Partition(n_samples, slices, epoch, seed, bool(shuffle))
