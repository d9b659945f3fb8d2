"""Binding each rank of a host to its own CPU cores (``TrainerBuilder.bind_cores()``): local rank
``r`` of ``n`` gets the ``r``-th of ``n`` equal slices of the cores this process may use
(``os.sched_getaffinity``), bound before torch starts its thread pools so that they inherit it.
Off by default; Linux only, elsewhere a :class:`ConfigError` (ARCHITECTURE-NOTES.md, ``_affinity``).
"""

from __future__ import annotations

import os
import sys

from flodl_core import ConfigError


def supported() -> bool:
    """Whether this platform can bind a process to cores (``os.sched_setaffinity``)."""
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def usable_cores() -> list[int]:
    """The cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def check_bindable(local_world: int, threads_per_rank: int | None) -> None:
    """Refuse early, in the launching process, a binding that cannot be made: no support, or
    fewer cores than ranks (or than ``threads_per_rank`` per rank)."""
    if not supported():
        raise ConfigError(
            f"bind_cores needs os.sched_setaffinity, which {sys.platform} lacks: leave it off here"
        )
    cores_for(0, local_world, threads_per_rank)


def cores_for(local_rank: int, local_world: int, threads_per_rank: int | None) -> list[int]:
    """The cores of local rank ``local_rank`` out of ``local_world`` ranks on this host: the
    ``local_rank``-th of ``local_world`` equal slices of :func:`usable_cores`. A
    :class:`ConfigError` when a slice would be empty or smaller than ``threads_per_rank``."""
    cores = usable_cores()
    per = len(cores) // local_world
    need = max(1, threads_per_rank or 1)
    if per < need:
        raise ConfigError(
            f"bind_cores: {local_world} rank(s) on this host with {need} thread(s) each need "
            f"{local_world * need} cores, but this process may use {len(cores)} "
            f"({', '.join(map(str, cores))}); use fewer ranks or threads_per_rank, or leave "
            "bind_cores off"
        )
    return cores[local_rank * per : (local_rank + 1) * per]


def bind(local_rank: int, local_world: int, threads_per_rank: int | None) -> list[int]:
    """Bind the calling thread (and threads it starts from now on) to its cores; returns those."""
    os.sched_setaffinity(0, cores := cores_for(local_rank, local_world, threads_per_rank))
    return cores
