"""``InstanceNorm``: instance normalisation over any number of spatial dimensions."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .._checks import check_int
from .._errors import ConfigError, ShapeError


class InstanceNorm(nn.Module):
    """Instance norm for ``(B, C, *spatial)`` with one or more spatial dims.

    torch splits this into ``InstanceNorm1d/2d/3d`` (also exported here) that differ only in
    the rank they accept; this one takes any rank >= 3 and uses the same parameter and buffer
    names (``weight``, ``bias``, ``running_mean``, ``running_var``, ``num_batches_tracked``), so
    state dicts move between the two. Defaults match torch: no affine, no running stats.
    """

    weight: nn.Parameter | None
    bias: nn.Parameter | None
    running_mean: torch.Tensor | None
    running_var: torch.Tensor | None
    num_batches_tracked: torch.Tensor | None

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
    ) -> None:
        super().__init__()
        num_features = check_int(num_features, "num_features", ge=1, where="InstanceNorm")
        if not eps > 0:
            raise ConfigError(f"InstanceNorm: eps must be > 0, got {eps!r}")
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = nn.Parameter(torch.ones(num_features))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", torch.zeros(num_features))
            self.register_buffer("running_var", torch.ones(num_features))
            self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (B, C, *spatial)`` -> same shape, each (sample, channel) slice normalised."""
        if x.dim() < 3 or x.shape[1] != self.num_features:
            raise ShapeError(
                f"InstanceNorm({self.num_features}): expected input (B, {self.num_features}, "
                f"*spatial) with at least one spatial dim, got shape {tuple(x.shape)}"
            )
        # num_batches_tracked exists for state-dict compatibility only; torch never advances it
        # for instance norm either.
        return F.instance_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training or not self.track_running_stats,
            self.momentum,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )
