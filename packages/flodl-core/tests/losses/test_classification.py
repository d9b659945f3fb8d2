"""Classification losses against torch.nn.functional; focal loss against its formula."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

import flodl_core as fc
from flodl_core import ConfigError, ShapeError

G = torch.Generator().manual_seed(0)
LOGITS = torch.randn(6, 4, dtype=torch.float64, generator=G)
LOGITS_3D = torch.randn(3, 4, 5, dtype=torch.float64, generator=G)
IDX = torch.tensor([0, 3, 1, -100, 2, 1])
IDX_3D = torch.randint(0, 4, (3, 5), generator=G)
WEIGHT = torch.tensor([1.0, 2.0, 0.5, 1.5], dtype=torch.float64)


def _value_and_grad(fn, x: torch.Tensor, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.clone().requires_grad_(True)
    y = fn(x, *args, **kwargs)
    (g,) = torch.autograd.grad(y.sum(), x)
    return y.detach(), g


def _same(ours, ref, x, *args, **kwargs) -> None:
    y, g = _value_and_grad(ours, x, *args, **kwargs)
    yr, gr = _value_and_grad(ref, x, *args, **kwargs)
    torch.testing.assert_close(y, yr)
    torch.testing.assert_close(g, gr)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_and_nll_match_torch(reduction: str) -> None:
    kw = {"weight": WEIGHT, "reduction": reduction}
    _same(fc.cross_entropy_loss, F.cross_entropy, LOGITS, IDX, label_smoothing=0.1, **kw)
    _same(fc.cross_entropy, F.cross_entropy, LOGITS_3D, IDX_3D, **kw)
    logp = F.log_softmax(LOGITS, dim=1)
    _same(fc.nll_loss, F.nll_loss, logp, IDX, **kw)


def test_cross_entropy_probability_target_and_int32_indices() -> None:
    probs = torch.softmax(torch.randn(6, 4, dtype=torch.float64, generator=G), dim=1)
    _same(fc.cross_entropy_loss, F.cross_entropy, LOGITS, probs)
    idx = torch.tensor([0, 3, 1, 2, 2, 1])
    torch.testing.assert_close(
        fc.cross_entropy_loss(LOGITS, idx.int()), F.cross_entropy(LOGITS, idx)
    )


def test_binary_losses_match_torch() -> None:
    target = torch.rand(6, 4, dtype=torch.float64, generator=G)
    pos_weight = torch.tensor([1.0, 3.0, 0.5, 2.0], dtype=torch.float64)
    _same(fc.bce_with_logits_loss, F.binary_cross_entropy_with_logits, LOGITS, target,
          pos_weight=pos_weight)  # fmt: skip
    _same(fc.bce_loss, F.binary_cross_entropy, torch.sigmoid(LOGITS), target)


@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div_defaults_to_batchmean(log_target: bool) -> None:
    logq = F.log_softmax(LOGITS, dim=1)
    p = torch.softmax(torch.randn(6, 4, dtype=torch.float64, generator=G), dim=1)
    target = p.log() if log_target else p
    ours = fc.kl_div_loss(logq, target, log_target=log_target)
    ref = F.kl_div(logq, target, reduction="batchmean", log_target=log_target)
    torch.testing.assert_close(ours, ref)
    # batchmean is the true KL: Σ p (log p − log q) / batch.
    torch.testing.assert_close(ours, (p * (p.log() - logq)).sum() / 6)
    _same(fc.kl_div_loss, F.kl_div, logq, target, reduction="sum", log_target=log_target)


def _focal_formula(logits, target, alpha, gamma):
    """−α_t (1 − p_t)^γ log p_t written element by element, mean over kept entries."""
    p = torch.softmax(logits, dim=1)
    terms = []
    for i, t in enumerate(target.tolist()):
        if t == -100:
            continue
        a = alpha[t] if isinstance(alpha, torch.Tensor) else alpha
        terms.append(-a * (1 - p[i, t]) ** gamma * torch.log(p[i, t]))
    return torch.stack(terms).mean()


@pytest.mark.parametrize("alpha", [0.25, 1.0, WEIGHT])
@pytest.mark.parametrize("gamma", [0.0, 0.5, 2.0])
def test_focal_multiclass_matches_formula(alpha, gamma: float) -> None:
    ours = fc.focal_loss(LOGITS.clone().requires_grad_(True), IDX, alpha=alpha, gamma=gamma)
    x = LOGITS.clone().requires_grad_(True)
    ref = _focal_formula(x, IDX, alpha, gamma)
    torch.testing.assert_close(ours, ref)
    _, g = _value_and_grad(lambda t: fc.focal_loss(t, IDX, alpha=alpha, gamma=gamma), LOGITS)
    (gr,) = torch.autograd.grad(ref, x)
    torch.testing.assert_close(g, gr)


def test_focal_gamma_zero_is_cross_entropy() -> None:
    ce = F.cross_entropy(LOGITS_3D, IDX_3D)
    torch.testing.assert_close(fc.focal_loss(LOGITS_3D, IDX_3D, alpha=None, gamma=0.0), ce)
    per = fc.focal_loss(LOGITS, IDX, alpha=None, gamma=0.0, reduction="none")
    assert per[3] == 0  # ignored entry
    torch.testing.assert_close(per.sum(), F.cross_entropy(LOGITS, IDX, reduction="sum"))


def test_focal_binary_matches_formula() -> None:
    target = (torch.rand(6, 4, dtype=torch.float64, generator=G) > 0.5).double()
    alpha, gamma = 0.25, 2.0
    p = torch.sigmoid(LOGITS)
    p_t = torch.where(target == 1, p, 1 - p)
    a_t = torch.where(target == 1, alpha, 1 - alpha)
    ref = (-a_t * (1 - p_t) ** gamma * torch.log(p_t)).mean()
    torch.testing.assert_close(fc.focal_loss(LOGITS, target, alpha=alpha, gamma=gamma), ref)
    # Down-weights easy examples: never above the alpha-weighted BCE.
    bce = F.binary_cross_entropy_with_logits(LOGITS, target, reduction="none") * a_t
    assert (fc.focal_loss(LOGITS, target, reduction="none") <= bce + 1e-12).all()


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: fc.cross_entropy_loss(torch.zeros(4), torch.zeros(4, dtype=torch.long)),
         ShapeError, r"input must be \(N, C\)"),
        (lambda: fc.cross_entropy_loss(LOGITS, torch.zeros(5, dtype=torch.long)),
         ShapeError, r"target has shape \(5,\), expected \(6,\)"),
        (lambda: fc.cross_entropy_loss(LOGITS, torch.zeros(6, 3)),
         ShapeError, r"probability target has shape \(6, 3\)"),
        (lambda: fc.cross_entropy_loss(LOGITS, IDX, label_smoothing=1.5),
         ConfigError, "label_smoothing"),
        (lambda: fc.cross_entropy_loss(LOGITS, IDX, weight=torch.ones(3)),
         ShapeError, r"weight has shape \(3,\), expected \(4,\)"),
        (lambda: fc.nll_loss(LOGITS, IDX.bool()), ShapeError, "integer tensor"),
        (lambda: fc.bce_loss(torch.zeros(4, 1), torch.zeros(4)), ShapeError, "target has shape"),
        (lambda: fc.bce_with_logits_loss(torch.zeros(4), torch.zeros(5)),
         ShapeError, "target has shape"),
        (lambda: fc.kl_div_loss(LOGITS, LOGITS, reduction="avg"), ConfigError, "reduction='avg'"),
        (lambda: fc.kl_div_loss(LOGITS, LOGITS[:3]), ShapeError, "target has shape"),
        (lambda: fc.focal_loss(LOGITS, IDX, gamma=-1.0), ConfigError, "gamma must be"),
        (lambda: fc.focal_loss(LOGITS, IDX, alpha=1.5), ConfigError, "alpha must be in"),
        (lambda: fc.focal_loss(LOGITS, IDX, alpha=torch.ones(3)), ShapeError, "alpha tensor"),
        (lambda: fc.focal_loss(LOGITS, IDX[:4]), ShapeError, "class-index target"),
        (lambda: fc.focal_loss(LOGITS, torch.zeros(6, 3)), ShapeError, "binary target"),
        (lambda: fc.cross_entropy_loss(LOGITS, [0, 1, 2, 3, 0, 1]),
         TypeError, "cross_entropy_loss: target must be a torch.Tensor, got list"),
        (lambda: fc.cross_entropy_loss(LOGITS, IDX, weight=[1.0, 1.0, 1.0, 1.0]),
         TypeError, "weight must be a torch.Tensor, got list"),
        (lambda: fc.nll_loss(LOGITS, [0, 1, 2, 3, 0, 1]), TypeError, "target must be a torch"),
        (lambda: fc.focal_loss(LOGITS, [0, 1, 2, 3, 0, 1]), TypeError, "target must be a torch"),
        (lambda: fc.bce_loss([0.5], torch.zeros(1)), TypeError, "probs must be a torch.Tensor"),
    ],
)  # fmt: skip
def test_bad_inputs(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()
