"""Bucket planning: order, device/dtype runs, capacity, wire dtype."""

from __future__ import annotations

import pytest
import torch

from flodl_core import ConfigError
from flodl_ddp import plan_buckets


def test_one_bucket_when_it_fits() -> None:
    ts = [torch.zeros(10), torch.zeros(2, 3), torch.zeros(1)]
    assert plan_buckets(ts) == [[0, 1, 2]]


def test_capacity_splits_runs() -> None:
    # float32: 10·4 = 40 B, 6·4 = 24 B, 4 B, 20·4 = 80 B; capacity 64 B
    ts = [torch.zeros(10), torch.zeros(2, 3), torch.zeros(1), torch.zeros(20)]
    # 40 + 24 = 64 fits; + 4 = 68 > 64 → new bucket; 4 + 80 > 64 → the big one alone
    assert plan_buckets(ts, bucket_bytes=64) == [[0, 1], [2], [3]]


def test_dtype_change_starts_a_bucket() -> None:
    ts = [torch.zeros(2), torch.zeros(2, dtype=torch.int64), torch.zeros(2), torch.zeros(2)]
    assert plan_buckets(ts) == [[0], [1], [2, 3]]


def test_wire_dtype_counts_wire_bytes() -> None:
    # 10 float32 = 40 B, but 20 B in bfloat16: two fit in 40 B only on a bf16 wire
    ts = [torch.zeros(10), torch.zeros(10)]
    assert plan_buckets(ts, bucket_bytes=40) == [[0], [1]]
    assert plan_buckets(ts, bucket_bytes=40, wire_dtype=torch.bfloat16) == [[0, 1]]
    # integers are never cast: 5 int64 = 40 B each
    ints = [torch.zeros(5, dtype=torch.int64)] * 2
    assert plan_buckets(ints, bucket_bytes=40, wire_dtype=torch.bfloat16) == [[0], [1]]


def test_empty_and_errors() -> None:
    assert plan_buckets([]) == []
    with pytest.raises(ConfigError, match="bucket_bytes must be an int >= 1"):
        plan_buckets([torch.zeros(1)], bucket_bytes=0)
    with pytest.raises(ConfigError, match="tensor 1 is a list"):
        plan_buckets([torch.zeros(1), [1.0]])  # type: ignore[list-item]
