"""Runs under ``torchrun``: its environment, and joining its process group restart-safely.

A process started by torchrun is one rank (:func:`torchrun_env`). That is also the portable
fallback for rank death: ``torchrun --max-restarts`` plus checkpoints. Without torchft a run
cannot shrink, but it can restart: torchrun tears the whole group down when a rank dies and
starts it again (up to ``--max-restarts`` times), and a script that finds its
``checkpoint_every`` folder resumes from it (``.resume(path)``).

One detail makes the restart work: torchrun (2.13, ``--standalone`` and c10d rendezvous) hands
every attempt the *same* agent store, still holding the previous attempt's keys, and the default
``env://`` initialisation of a process group then reads the dead attempt's addresses and fails to
connect. :func:`init_torchrun_group` joins under a per-attempt prefix instead.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK")


def torchrun_env() -> dict[str, int | str] | None:
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` when running under torchrun."""
    if not all(v in os.environ for v in TORCHRUN_VARS):
        return None
    return {
        "rank": int(os.environ["RANK"]),
        "world_size": int(os.environ["WORLD_SIZE"]),
        "local_rank": int(os.environ["LOCAL_RANK"]),
        "master_addr": os.environ["MASTER_ADDR"],
    }


def local_world(devices: list[str], listed: bool) -> int:
    """Ranks on this host under torchrun: ``LOCAL_WORLD_SIZE``, else the ``devices`` the run
    lists for this node (``listed``), else one."""
    if "LOCAL_WORLD_SIZE" in os.environ:
        return int(os.environ["LOCAL_WORLD_SIZE"])
    return len(devices) if listed else 1


def attempt() -> int:
    """torchrun's restart count (``TORCHELASTIC_RESTART_COUNT``; 0 outside torchrun)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)


def init_torchrun_group(backend: str, timeout_s: float) -> None:
    """``init_process_group`` from torchrun's environment (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``), under a prefix of this attempt, so a restarted group never
    reads the keys of the one it replaces. As with ``env://``, rank 0 hosts the store unless
    torchrun's agent already does (``TORCHELASTIC_USE_AGENT_STORE``)."""
    rank = int(os.environ["RANK"])
    timeout = timedelta(seconds=timeout_s)
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        None,
        not agent_store and rank == 0,
        timeout=timeout,
        multi_tenant=True,
    )
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(f"flodl-attempt{attempt()}", store),
        rank=rank,
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timeout,
    )
