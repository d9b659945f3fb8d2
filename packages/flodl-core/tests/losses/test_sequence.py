"""CTC loss against torch.nn.functional."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import flodl_core as fc
from flodl_core import ConfigError, ShapeError

G = torch.Generator().manual_seed(0)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_matches_torch(reduction: str) -> None:
    t, n, c = 12, 3, 5
    log_probs = torch.randn(t, n, c, dtype=torch.float64, generator=G).log_softmax(2)
    targets = torch.randint(1, c, (n, 4), generator=G)
    in_lens, tgt_lens = [12, 10, 9], [4, 3, 2]
    ours = fc.ctc_loss(log_probs, targets, in_lens, tgt_lens, reduction=reduction)
    ref = F.ctc_loss(
        log_probs, targets, torch.tensor(in_lens), torch.tensor(tgt_lens), reduction=reduction
    )
    torch.testing.assert_close(ours, ref)
    x = log_probs.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fc.ctc_loss(x, targets, in_lens, tgt_lens).sum(), x)
    xr = log_probs.clone().requires_grad_(True)
    l_ref = F.ctc_loss(xr, targets, torch.tensor(in_lens), torch.tensor(tgt_lens))
    (gr,) = torch.autograd.grad(l_ref, xr)
    torch.testing.assert_close(g, gr)


def test_ctc_bad_inputs() -> None:
    lp = torch.zeros(8, 2, 4).log_softmax(2)
    tg = torch.ones(2, 3, dtype=torch.long)
    with pytest.raises(ShapeError, match=r"log_probs must be \(T, N, C\)"):
        fc.ctc_loss(lp[:, 0], tg, [8, 8], [3, 3])
    with pytest.raises(ConfigError, match=r"blank=4 is not a class index in \[0, 4\)"):
        fc.ctc_loss(lp, tg, [8, 8], [3, 3], blank=4)
    with pytest.raises(ShapeError, match=r"input_lengths has shape \(3,\), expected \(2,\)"):
        fc.ctc_loss(lp, tg, [8, 8, 8], [3, 3])
    with pytest.raises(ShapeError, match=r"targets must be \(N=2, S\)"):
        fc.ctc_loss(lp, torch.ones(3, 3, dtype=torch.long), [8, 8], [3, 3])
    with pytest.raises(TypeError, match=r"targets must be a torch\.Tensor, got list"):
        fc.ctc_loss(lp, [[1, 1, 1], [1, 1, 1]], [8, 8], [3, 3])
