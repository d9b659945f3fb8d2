from __future__ import annotations

import math

import pytest
import torch

from flodl_core import ConfigError
from flodl_core.data import epoch_permutation, even_shard, weighted_shards


def test_permutation_is_randperm_seeded_with_seed_plus_epoch() -> None:
    gen = torch.Generator().manual_seed(42 + 3)
    expected = torch.randperm(100, generator=gen)
    assert torch.equal(epoch_permutation(100, 42, 3), expected)
    assert torch.equal(epoch_permutation(100, 42, 3), epoch_permutation(100, 44, 1))
    assert not torch.equal(epoch_permutation(100, 42, 0), epoch_permutation(100, 42, 1))
    assert torch.equal(epoch_permutation(100, 42, 5).sort().values, torch.arange(100))


def test_no_shuffle_is_identity() -> None:
    assert torch.equal(epoch_permutation(7, 42, 9, shuffle=False), torch.arange(7))


@pytest.mark.parametrize(("n", "seed", "epoch"), [(-1, 0, 0), (3, -1, 0), (3, 0, -2), (3, 0, 1.5)])
def test_permutation_rejects_bad_ints(n: int, seed: int, epoch: int) -> None:
    with pytest.raises(ConfigError, match="must be an int >= 0"):
        epoch_permutation(n, seed, epoch)


def test_shards_are_equal_disjoint_and_contiguous() -> None:
    parts = [even_shard(10, r, 3) for r in range(3)]
    assert parts == [range(0, 3), range(3, 6), range(6, 9)]


@pytest.mark.parametrize(
    ("n", "rank", "world", "match"),
    [(10, 3, 3, "out of range"), (10, 0, 0, ">= 1"), (-10, 0, 1, "n must be an int >= 0")],
)
def test_even_shard_errors(n: int, rank: int, world: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        even_shard(n, rank, world)


def test_weighted_shards_are_proportional_and_exact() -> None:
    parts = weighted_shards(100, [2.0, 1.0, 1.0])
    assert parts == [range(0, 50), range(50, 75), range(75, 100)]
    parts = weighted_shards(10, [1, 1, 1])
    assert [len(p) for p in parts] == [4, 3, 3] and parts[-1].stop == 10
    assert [len(p) for p in weighted_shards(5, [0, 1])] == [0, 5]


@pytest.mark.parametrize(
    ("weights", "match"),
    [([], "at least one"), ([1, -1], "weight 1"), ([math.nan], "weight 0"), ([0, 0], "sum to 0")],
)
def test_weighted_shards_errors(weights: list[float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        weighted_shards(10, weights)
