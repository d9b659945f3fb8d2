from __future__ import annotations

import pytest
import torch

from flodl_core.data._gather import RowGather


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.int64, torch.uint8, torch.bool, torch.bfloat16]
)
def test_matches_index_select(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    t = (torch.randn(20, 3, 2, generator=g) * 5).to(dtype)
    idx = torch.tensor([4, 19, 0, 4, 7])
    (out,) = RowGather([t])(idx)
    assert out.dtype == dtype and torch.equal(out, t.index_select(0, idx))


def test_mixed_fields_strided_and_grad() -> None:
    base = torch.randn(10, 6)
    strided = base[:, ::2]  # not contiguous
    weights = torch.randn(10, requires_grad=True)
    halves = torch.randn(10, 2).to(torch.bfloat16)  # no NumPy dtype: index_select fallback
    idx = torch.tensor([9, 1, 5])
    outs = RowGather([strided, weights, halves])(idx)
    for t, out in zip([strided, weights.detach(), halves], outs, strict=True):
        assert torch.equal(out, t.index_select(0, idx))
    assert not outs[1].requires_grad  # data, not a graph node


def test_results_are_independent_copies() -> None:
    t = torch.zeros(4, 2)
    (out,) = RowGather([t])(torch.tensor([1, 2]))
    out += 1
    assert float(t.sum()) == 0.0
