"""Per-epoch partition: coverage, proportional sizes, determinism, errors."""

from __future__ import annotations

import pytest
import torch

from flodl_core import ConfigError
from flodl_core.data import epoch_permutation
from flodl_ddp import Partition, partition, split_sizes


@pytest.mark.parametrize("shares", [3, [1.0, 1.0], [2.0, 1.0], [0.5, 0.3, 0.2], [5, 0, 1]])
@pytest.mark.parametrize("n", [7, 100, 1001])
def test_every_sample_exactly_once(n: int, shares: object) -> None:
    plan = partition(n, shares, epoch=2, seed=7)  # type: ignore[arg-type]
    ids = torch.cat([plan.indices(r) for r in range(len(plan))])
    assert ids.numel() == n
    assert torch.equal(ids.sort().values, torch.arange(n))
    # consecutive slices of one global order
    assert torch.equal(ids, plan.order())
    assert [s.start for s in plan] == [0, *[s.stop for s in plan][:-1]]
    assert plan[-1].stop == n


def test_sizes_largest_remainder() -> None:
    # 10 · 2/3 = 6.667, 10 · 1/3 = 3.333 → floors 6, 3; one left over goes to the larger
    # remainder (rank 0, .667) → 7, 3
    assert split_sizes(10, [2.0, 1.0]) == [7, 3]
    # 100 · (.5, .3, .2) = 50, 30, 20 exactly
    assert split_sizes(100, [0.5, 0.3, 0.2]) == [50, 30, 20]
    # 11 equal over 3: 3.667 each → floors 3,3,3; two left over, equal remainders → ties go to
    # the lower ranks → 4, 4, 3
    assert split_sizes(11, 3) == [4, 4, 3]
    # 7 · (1, 1, 1, 1)/4 = 1.75 → 1,1,1,1 + 3 → 2,2,2,1
    assert split_sizes(7, [1, 1, 1, 1]) == [2, 2, 2, 1]
    # scale of the shares does not matter
    assert split_sizes(1001, [200.0, 100.0]) == split_sizes(1001, [2, 1]) == [667, 334]


def test_sizes_within_one_of_exact() -> None:
    shares = [0.37, 1.3, 2.9, 0.05]
    # large enough that no positive share rounds to 0 (that case is tested below)
    for n in (97, 1000, 4321):
        sizes = split_sizes(n, shares)
        assert sum(sizes) == n
        for s, w in zip(sizes, shares, strict=True):
            assert abs(s - n * w / sum(shares)) < 1.0 + 1e-9


def test_positive_share_never_empty_zero_share_always_empty() -> None:
    # 3 · (1000, 1)/1001 = 2.997, 0.003 → floors 2, 0; remainder to rank 0 (.997) → 3, 0;
    # rank 1 has a positive share, so it takes one from the largest → 2, 1
    assert split_sizes(3, [1000, 1]) == [2, 1]
    assert split_sizes(5, [1, 0, 1]) == [3, 0, 2]


def test_deterministic_and_epoch_dependent() -> None:
    a = partition(50, [2, 1], epoch=3, seed=11)
    b = partition(50, [2, 1], epoch=3, seed=11)
    assert a == b
    for r in range(2):
        assert torch.equal(a.indices(r), b.indices(r))
    assert torch.equal(a.order(), epoch_permutation(50, 11, 3))
    c = partition(50, [2, 1], epoch=4, seed=11)
    assert not torch.equal(a.order(), c.order())
    plain = partition(6, 2, epoch=0, shuffle=False)
    assert plain.indices(1).tolist() == [3, 4, 5]


def test_partition_is_a_sequence_of_ranges() -> None:
    plan = partition(10, 2, epoch=0)
    assert isinstance(plan, Partition)
    assert len(plan) == 2 and list(plan) == [range(0, 5), range(5, 10)]
    assert plan.sizes == [5, 5]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_samples": 1, "ranks": 2, "epoch": 0}, "n_samples=1 is smaller than the 2 ranks"),
        ({"n_samples": -1, "ranks": 2, "epoch": 0}, "n_samples must be an int >= 0"),
        ({"n_samples": 10, "ranks": 0, "epoch": 0}, "world_size must be >= 1"),
        ({"n_samples": 10, "ranks": [], "epoch": 0}, "shares is empty"),
        ({"n_samples": 10, "ranks": [1, -1], "epoch": 0}, "share of rank 1 is -1"),
        ({"n_samples": 10, "ranks": [1, float("nan")], "epoch": 0}, "share of rank 1 is nan"),
        ({"n_samples": 10, "ranks": [0, 0], "epoch": 0}, "sum to 0"),
        ({"n_samples": 10, "ranks": "2", "epoch": 0}, "world size"),
        ({"n_samples": 10, "ranks": 2, "epoch": -1}, "epoch must be an int >= 0"),
        ({"n_samples": 10, "ranks": 2, "epoch": 0, "seed": 1.5}, "seed must be an int"),
    ],
)
def test_errors_name_the_argument(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        partition(**kwargs)  # type: ignore[arg-type]


def test_indices_rank_out_of_range() -> None:
    with pytest.raises(ConfigError, match=r"rank must be an int in 0\.\.1"):
        partition(10, 2, epoch=0).indices(2)
