"""``StateAdd``: adds the graph references it is given to its input."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from .._errors import ShapeError


class StateAdd(nn.Module):
    """Identity on ``forward(x)``; ``forward_named(x, refs)`` returns ``x + Σ refs``.

    The graph builder calls ``forward_named`` on modules that define it when ``.using(...)``
    wires tagged outputs in. With a forward reference (``using("memory")`` before
    ``tag("memory")``) this is a running accumulator carried across forward calls: the first
    call reads zeros, later calls read the previous step's value.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (*)`` -> ``x`` unchanged."""
        return x

    def forward_named(self, x: torch.Tensor, refs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``x: (*S)``, every ``refs[name]: (*S)`` -> ``x + Σ refs``: ``(*S)``.

        Shapes must match exactly: a silent broadcast of a state buffer is almost always a bug.
        """
        out = x
        for name, ref in refs.items():
            if ref.shape != x.shape:
                raise ShapeError(
                    f"StateAdd: ref '{name}' has shape {tuple(ref.shape)}, expected the input's "
                    f"shape {tuple(x.shape)}"
                )
            out = out + ref
        return out
