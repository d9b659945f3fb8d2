"""Rank-agnostic InstanceNorm against torch's InstanceNorm1d/2d/3d."""

from __future__ import annotations

import pytest
import torch

from flodl_core import ConfigError, InstanceNorm, ShapeError

TORCH = {3: torch.nn.InstanceNorm1d, 4: torch.nn.InstanceNorm2d, 5: torch.nn.InstanceNorm3d}


@pytest.mark.parametrize("rank", [3, 4, 5])
@pytest.mark.parametrize(("affine", "track"), [(False, False), (True, True)])
def test_matches_torch(rank: int, affine: bool, track: bool) -> None:
    torch.manual_seed(0)
    shape = (2, 3, 5, 4, 3)[:rank]
    ours = InstanceNorm(3, affine=affine, track_running_stats=track)
    ref = TORCH[rank](3, affine=affine, track_running_stats=track)
    if affine:
        with torch.no_grad():
            ours.weight.uniform_(0.5, 1.5)
            ours.bias.normal_()
        ref.load_state_dict(ours.state_dict())
    assert set(ours.state_dict()) == set(ref.state_dict())
    for _ in range(2):  # train mode, running stats updated twice
        x = torch.randn(shape, requires_grad=True)
        xr = x.detach().clone().requires_grad_(True)
        y, yr = ours(x), ref(xr)
        torch.testing.assert_close(y, yr)
        y.pow(2).sum().backward()
        yr.pow(2).sum().backward()
        torch.testing.assert_close(x.grad, xr.grad)
    ours.eval()
    ref.eval()
    x = torch.randn(shape)
    torch.testing.assert_close(ours(x), ref(x))
    for key, value in ref.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[key], value)


def test_errors() -> None:
    with pytest.raises(ConfigError, match="num_features"):
        InstanceNorm(0)
    with pytest.raises(ShapeError, match=r"\(B, 3, \*spatial\).*\(2, 3\)"):
        InstanceNorm(3)(torch.zeros(2, 3))
    with pytest.raises(ShapeError, match=r"\(2, 4, 5\)"):
        InstanceNorm(3)(torch.zeros(2, 4, 5))
