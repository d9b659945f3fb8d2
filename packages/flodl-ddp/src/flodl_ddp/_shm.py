"""Same-host averaging through shared memory: one slot per rank in a mapped file.

Each rank copies its tensors into its own slot; the round's arrival exchange tells every rank
that all slots are written, and each sums them itself, in rank order (the same bits everywhere).
Rank 0 makes the file in ``/dev/shm`` (else the temp folder) under a random name, and unlinks it
once every rank has mapped it: nothing is left behind. A rank attaches only to a regular
``flodl-ddp-*.shm`` file in that folder, owned by this user, not a link, holding the nonce rank 0
sent; ranks on other hosts, or a folder too small, keep gloo (ARCHITECTURE-NOTES.md, ``_shm``).
A slot is rewritten only after the round's closing exchange, so reuse needs no more barrier.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import stat
import tempfile
from collections.abc import Sequence

import torch
from torch import Tensor

from ._comm import Comm

HEADER_BYTES = 64  # before a shared file's payload: the nonce (16) and room to spare
_ALIGN = 64  # every region starts on a cache line
PREFIX, SUFFIX = "flodl-ddp-", ".shm"
Specs = Sequence[tuple[int, torch.dtype]]  # one (numel, dtype) per tensor of a slot


def _shm_dir() -> str:
    ok = os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
    return "/dev/shm" if ok else tempfile.gettempdir()


def host_label() -> str:
    """The host this rank runs on, as the run knows it: the cluster file's host name under
    ``fdl @cluster`` (``FLODL_CLUSTER_HOST``), else the machine's host name."""
    return os.environ.get("FLODL_CLUSTER_HOST") or socket.gethostname()


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class SharedSlots:
    """Per-rank regions of one shared mapping (made by :meth:`open`, a collective): a slot
    holds one 1-D tensor per ``(numel, dtype)`` spec; ``slots[r][k]`` is rank ``r``'s tensor for
    spec ``k``, writable by every rank (by convention only rank ``r`` writes it)."""

    def __init__(self, mm: mmap.mmap, specs: Specs, world: int, path: str) -> None:
        self._mm = mm  # the tensors below borrow its memory: keep it alive as long as they are
        self.path = path
        """Where the file was while the ranks mapped it (unlinked since)."""
        self.slots: list[list[Tensor]] = []
        offset = HEADER_BYTES
        for _ in range(world):
            row = []
            for numel, dtype in specs:
                if numel == 0:  # (frombuffer refuses a count of 0)
                    row.append(torch.empty(0, dtype=dtype))
                else:
                    row.append(torch.frombuffer(mm, dtype=dtype, count=numel, offset=offset))
                offset += _aligned(numel * dtype.itemsize)
            self.slots.append(row)

    @staticmethod
    def nbytes(specs: Specs, world: int) -> int:
        """The mapping's size: the header, then ``world`` slots of aligned regions."""
        return HEADER_BYTES + world * sum(_aligned(n * d.itemsize) for n, d in specs)

    @classmethod
    def open(cls, comm: Comm, specs: Specs, eligible: bool) -> SharedSlots | None:
        """Map one shared file on every rank (a collective over ``comm``), or ``None`` on every
        rank when any cannot (:func:`map_shared`)."""
        shared = map_shared(comm, "shm", cls.nbytes(specs, comm.world_size), eligible)
        return None if shared is None else cls(shared[0], specs, comm.world_size, shared[1])


def map_shared(comm: Comm, tag: str, size: int, eligible: bool) -> tuple[mmap.mmap, str] | None:
    """A file of ``size`` bytes rank 0 creates and every rank maps (the mapping, its path), or
    ``None`` on every rank when any cannot (another host per :func:`host_label`, no writable
    folder, ``eligible`` false). A collective over ``comm`` (two exchanges named after ``tag``);
    the name is unlinked before it returns (the mappings keep the memory)."""
    rank, offer = comm.rank, b""
    got: mmap.mmap | None = None
    if rank == 0 and eligible:
        with contextlib.suppress(OSError):
            got, offer = _create(size)
    offers = comm.exchange_bytes(tag, offer)
    path = ""
    if offers[0]:
        info = json.loads(offers[0])
        path = info["path"]
        if rank != 0 and eligible and info["host"] == host_label():
            got = _attach(path, size, bytes.fromhex(info["nonce"]))
    oks = comm.exchange_bytes(tag + "ok", b"1" if got is not None else b"")
    if rank == 0 and path:  # every rank has mapped it or given up
        with contextlib.suppress(OSError):
            os.unlink(path)
    if got is not None and not all(oks):
        got.close()
        got = None
    return None if got is None else (got, path)


def _create(size: int) -> tuple[mmap.mmap, bytes]:
    """A new mapped file of ``size`` bytes, a random nonce in its header; the offer naming it."""
    fd, path = tempfile.mkstemp(prefix=PREFIX, suffix=SUFFIX, dir=_shm_dir())  # mode 0600
    try:
        if hasattr(os, "posix_fallocate"):  # a full /dev/shm fails here, not with a SIGBUS
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(fd)  # the mapping keeps the memory
    mm[:16] = nonce = os.urandom(16)
    return mm, json.dumps({"path": path, "nonce": nonce.hex(), "host": host_label()}).encode()


def _ours(path: str, st: os.stat_result) -> bool:
    """Whether ``path`` is a file this run could have made: ``flodl-ddp-*.shm`` in the
    shared-memory folder, a regular file owned by this user that nobody else may write."""
    name = os.path.basename(path)
    return (
        os.path.dirname(os.path.abspath(path)) == os.path.abspath(_shm_dir())
        and name.startswith(PREFIX)
        and name.endswith(SUFFIX)
        and stat.S_ISREG(st.st_mode)
        and st.st_uid == os.getuid()
        and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def _attach(path: str, size: int, nonce: bytes) -> mmap.mmap | None:
    """Rank 0's file mapped here, or ``None`` when it is not there (another host), is not the
    same file (its nonce differs) or is not one this run could have made (:func:`_ours`)."""
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_size != size or not _ours(path, st):
            return None
        mm = mmap.mmap(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)
    if mm[:16] != nonce:
        mm.close()
        return None
    return mm
