"""The bench's cells besides flodl-ddp's six modes: ``solo-N`` (one device alone) and
``cpu-async-diloco`` (cpu-async with :class:`flodl_ddp.DiLoCo` as the outer optimizer)."""

from __future__ import annotations

from flodl_core import ConfigError
from flodl_ddp import MODES, DiLoCo, OuterOptimizer, parse_mode

DILOCO = "cpu-async-diloco"
"""cpu-async whose averagings are DiLoCo's outer steps (Nesterov, lr 0.7, momentum 0.9)."""

OUTER: dict[str, tuple[str, type[OuterOptimizer]]] = {DILOCO: ("cpu-async", DiLoCo)}
"""Cell name -> (the trainer's mode, its outer optimizer's class, built with its defaults)."""

BENCH_MODES: tuple[str, ...] = (*MODES, *OUTER)
"""Every multi-rank cell, in report order: the six modes, then the outer-optimizer cells."""


def is_solo(cell: str) -> bool:
    """Whether ``cell`` is one device alone (``solo-N``): no mode, no averaging."""
    return cell.startswith("solo-")


def parse_cell(name: str) -> str:
    """The canonical name of a multi-rank cell (``cpu_async``, ``CPU-Async-DiLoCo`` ...).

    Raises:
        ConfigError: an unknown name (the message lists the cells).
    """
    key = name.strip().lower().replace("_", "-")
    if key in OUTER:
        return key
    try:
        return parse_mode(name).name
    except ConfigError:
        raise ConfigError(
            f"unknown mode {name!r}; expected solo-N, {', '.join(BENCH_MODES)} or all"
        ) from None


def trainer_mode(cell: str) -> str:
    """The flodl-ddp mode a multi-rank cell trains in."""
    return OUTER[cell][0] if cell in OUTER else cell


def outer_optimizer(cell: str) -> OuterOptimizer | None:
    """A fresh outer optimizer for the cell, or ``None`` (plain averaging)."""
    return OUTER[cell][1]() if cell in OUTER else None
