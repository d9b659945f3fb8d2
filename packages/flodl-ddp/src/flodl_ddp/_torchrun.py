"""Runs under ``torchrun``: its environment, joining its process group restart-safely (each
restart attempt under a prefix of its own, see ``ARCHITECTURE-NOTES.md``), and a run's keys.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

from ._comm import StoreComm


def torchrun_env() -> dict[str, int | str] | None:
    """``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` when running under torchrun."""
    if not all(v in os.environ for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK")):
        return None
    env = {k.lower(): int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    return {**env, "master_addr": os.environ["MASTER_ADDR"]}


def local_world(devices: list[str], listed: bool) -> int:
    """Ranks on this host under torchrun: ``LOCAL_WORLD_SIZE``, else the ``devices`` the run
    lists for this node (``listed``), else one."""
    return int(os.environ.get("LOCAL_WORLD_SIZE", len(devices) if listed else 1))


def init_torchrun_group(backend: str, timeout_s: float) -> None:
    """``init_process_group`` from torchrun's environment under a prefix of this attempt
    (``TORCHELASTIC_RESTART_COUNT``). As with ``env://``, rank 0 hosts the store unless
    torchrun's agent already does (``TORCHELASTIC_USE_AGENT_STORE``)."""
    rank, timeout = int(os.environ["RANK"]), timedelta(seconds=timeout_s)
    server = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    store = dist.TCPStore(addr, port, None, server, timeout=timeout, multi_tenant=True)
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    store, world = dist.PrefixStore(f"flodl-attempt{attempt}", store), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def join_group(device: torch.device, timeout_s: float) -> bool:
    """Join torchrun's process group (restart-safe) unless this process has one; whether this
    call made it (and must destroy it)."""
    if dist.is_initialized():
        return False
    init_torchrun_group("cpu:gloo,cuda:nccl" if device.type == "cuda" else "gloo", timeout_s)
    return True


def run_key(salt: str) -> str:
    """The store key prefix of a run: from the cluster's run token under ``fdl @cluster`` (every
    rank derives the same one), else from ``salt``."""
    if token := os.environ.get("FLODL_CLUSTER_TOKEN"):
        return hmac.new(token.encode(), f"store:{salt}".encode(), hashlib.sha256).hexdigest()[:32]
    return f"flodl-ddp/{salt}"


def group_comm(salt: str, timeout_s: float) -> StoreComm:
    """A control channel over the default group's store, under :func:`run_key` of ``salt``
    (every rank makes its runs in the same order, so the salts agree)."""
    store = dist.PrefixStore(run_key(salt), _get_default_store())
    return StoreComm(store, dist.get_rank(), dist.get_world_size(), timeout_s)
