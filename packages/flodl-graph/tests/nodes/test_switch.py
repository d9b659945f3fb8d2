"""Switch: only the selected branch runs; the index is checked at run time."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_core import BuildError, ConfigError, ShapeError
from flodl_graph import ArgmaxSelector, FixedSelector, FlowBuilder
from flodl_graph.nodes import Switch


class Pick(nn.Module):
    """Selects the branch held in ``self.index`` (as a tensor, like a learned selector)."""

    def __init__(self, index) -> None:
        super().__init__()
        self.index = index

    def forward(self, x):
        return self.index


class Spy(nn.Linear):
    def __init__(self) -> None:
        super().__init__(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return super().forward(x)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_switch_runs_only_the_selected_branch(parity, index) -> None:
    branches = [Spy(), Spy(), Spy()]
    g = FlowBuilder().switch(FixedSelector(index), branches).build()
    parity(g, branches[index], list(branches[index].parameters()), torch.randn(2, 4))
    assert [b.calls for b in branches] == [2 if i == index else 0 for i in range(3)]
    assert [p.grad is not None for b in branches for p in b.parameters()].count(True) == 2


def test_switch_accepts_tensor_index_and_argmax_selector() -> None:
    branches = [nn.Linear(4, 4), nn.Linear(4, 4)]
    g = FlowBuilder().switch(Pick(torch.tensor([1])), branches).build()
    x = torch.randn(2, 4)
    torch.testing.assert_close(g(x), branches[1](x))
    sel = ArgmaxSelector(4, 2)
    g2 = FlowBuilder().switch(sel, branches).build()
    i = int(sel.proj(x).mean(0).argmax())
    torch.testing.assert_close(g2(x), branches[i](x))
    sw = g2.nodes[1].module
    assert isinstance(sw, Switch)
    torch.testing.assert_close(sw(x), g2(x))


@pytest.mark.parametrize(
    ("index", "err", "needle"),
    [
        (2, ConfigError, "switch_2: the selector chose branch 2 but only 2 branches exist"),
        (-1, ConfigError, "chose branch -1"),
        (torch.tensor([0, 1]), ShapeError, "expected a single element"),
        (torch.tensor(0.5), ConfigError, "expected an integer"),
        ("a", ConfigError, "expected an int or a single-element tensor"),
    ],
)
def test_switch_bad_index_at_run_time(index, err, needle) -> None:
    g = FlowBuilder().switch(Pick(index), [nn.Linear(4, 4), nn.Linear(4, 4)]).build()
    with pytest.raises(err, match=needle):
        g(torch.randn(1, 4))


def test_switch_errors_at_build() -> None:
    with pytest.raises(BuildError) as info:
        FlowBuilder().switch(FixedSelector(0), [nn.Linear(4, 4)]).build()
    assert "at least 2 branches" in info.value.errors[0]
