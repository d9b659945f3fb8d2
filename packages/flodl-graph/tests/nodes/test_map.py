"""Map: each / over / slices, per row or batched, against hand-written loops."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from flodl_core import BuildError, ShapeError
from flodl_graph import FlowBuilder
from flodl_graph.nodes import Map


class RowCount(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.shapes: list[tuple[int, ...]] = []

    def forward(self, x):
        self.shapes.append(tuple(x.shape))
        return self.lin(x)


def test_each_calls_body_per_row(parity) -> None:
    body = RowCount()
    g = FlowBuilder().map(body).each().build()
    parity(g, lambda x: torch.cat([body.lin(x[i : i + 1]) for i in range(5)]),
           list(body.parameters()), torch.randn(5, 4))  # fmt: skip
    assert body.shapes[0] == (1, 4) and len(body.shapes) == 5


def test_each_batched_calls_once() -> None:
    body = RowCount()
    g = FlowBuilder().map(body).batched().each().build()
    x = torch.randn(5, 4)
    torch.testing.assert_close(g(x), body.lin(x))
    assert body.shapes == [(5, 4)]


def test_each_empty_passes_through() -> None:
    g = FlowBuilder().map(nn.Linear(4, 3)).each().build()
    x = torch.randn(0, 4)
    assert g(x) is x


@pytest.mark.parametrize("over", [False, True])
def test_each_refuses_a_0d_input(over: bool) -> None:
    fb = FlowBuilder(nn.Identity()).tag("t").map(nn.Identity())
    g = (fb.over("t") if over else fb.each()).build()
    with pytest.raises(ShapeError, match=r"map_2: map needs an input with a row dim"):
        g(torch.tensor(1.0))


def test_over_maps_a_tagged_tensor_and_replaces_stream(parity) -> None:
    a, b, body = nn.Linear(4, 4), nn.Linear(4, 6), nn.Linear(4, 2)
    g = FlowBuilder(a).tag("early").through(b).map(body).over("early").build()
    parity(g, lambda x: torch.cat([body(r) for r in a(x).split(1)]),
           [*a.parameters(), *body.parameters()], torch.randn(3, 4))  # fmt: skip
    assert g.nodes[-1].inputs == ("linear_1",)


@pytest.mark.parametrize("batched", [False, True])
def test_slices(parity, batched) -> None:
    body = nn.Linear(3, 2)
    mb = FlowBuilder().map(body)
    g = (mb.batched() if batched else mb).slices(4).build()

    def hand(x):
        rows = x.reshape(-1, 3)
        out = body(rows) if batched else torch.cat([body(r) for r in rows.split(1)])
        return out.reshape(x.shape[0], -1)

    out = parity(g, hand, list(body.parameters()), torch.randn(5, 12))
    assert out.shape == (5, 8)
    m = g.nodes[1].module
    assert isinstance(m, Map)
    torch.testing.assert_close(m(torch.ones(2, 12)), g(torch.ones(2, 12)))


@pytest.mark.parametrize(
    ("shape", "needle"), [((12,), "rank >= 2"), ((2, 10), "last dim divisible by 4")]
)
def test_slices_shape_errors(shape, needle) -> None:
    g = FlowBuilder().map(nn.Linear(3, 3)).slices(4).build()
    with pytest.raises(ShapeError, match=needle):
        g(torch.randn(*shape))


def test_map_build_errors() -> None:
    with pytest.raises(BuildError) as info:
        (FlowBuilder(nn.Linear(2, 2)).map(nn.Linear(2, 2)).over("nope")
         .map(nn.Linear(2, 2)).slices(0).map(nn.Linear(2, 2)).each().using(["a"])
         .build())  # fmt: skip
    errs = info.value.errors
    assert "no tag 'nope' defined earlier" in errs[0]
    assert "slices(0)" in errs[1] and "n must be an int >= 1" in errs[1]
    assert "map_2 (map) takes no refs" in errs[2]
