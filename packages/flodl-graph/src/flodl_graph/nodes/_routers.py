"""Routers for ``gate`` (soft weights) and selectors for ``switch`` (one branch index)."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor, nn

from flodl_core import check_int


def _check_dims(owner: str, **dims: int) -> None:
    for name, v in dims.items():
        check_int(v, name, gt=0, where=owner, expected="a positive int")


def _add_refs(x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
    for r in refs.values():
        x = x + r
    return x


class _LinearRouter(nn.Module):
    """A linear projection to one score per expert, squashed by the subclass's ``forward``."""

    def __init__(self, in_features: int, n_experts: int) -> None:
        super().__init__()
        _check_dims(type(self).__name__, in_features=in_features, n_experts=n_experts)
        self.proj = nn.Linear(in_features, n_experts)

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        """Refs are added to the input before projecting (context-conditioned routing)."""
        return self.forward(_add_refs(x, refs))


class SoftmaxRouter(_LinearRouter):
    """Linear projection then softmax over experts: x (..., in) -> weights (..., n_experts)."""

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).softmax(-1)


class SigmoidRouter(_LinearRouter):
    """Linear then sigmoid: independent weights in (0, 1) that need not sum to 1."""

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).sigmoid()


class FixedSelector(nn.Module):
    """Always selects branch ``index``. Returns a Python int, so ``torch.compile`` sees a
    constant and the switch compiles without a graph break."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = check_int(index, "index", ge=0, where="FixedSelector")

    def forward(self, x: Tensor) -> int:
        return self.index

    def extra_repr(self) -> str:
        return str(self.index)


class ArgmaxSelector(nn.Module):
    """Linear scores, then the argmax branch: x (B, in) -> a 0-d index tensor.

    The whole batch takes one branch; for B > 1 the decision uses the batch-mean score (for
    B == 1 this is the plain argmax). No gradient reaches the selector through the index.
    """

    def __init__(self, in_features: int, n_branches: int) -> None:
        super().__init__()
        _check_dims("ArgmaxSelector", in_features=in_features, n_branches=n_branches)
        self.proj = nn.Linear(in_features, n_branches)

    def forward(self, x: Tensor) -> Tensor:
        scores = self.proj(x)
        return scores.reshape(-1, scores.shape[-1]).mean(0).argmax()

    def forward_named(self, x: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        return self.forward(_add_refs(x, refs))
