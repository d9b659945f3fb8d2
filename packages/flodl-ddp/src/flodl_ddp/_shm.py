"""Same-host averaging through shared memory: one slot per rank in a mapped file.

gloo moves CPU tensors over loopback TCP even when every rank runs on one machine. On a 2-core
host a gloo ``all_reduce`` between two ranks measured 1.7 ms for 31 KB and 13 ms for 7 MB, where
reading the other rank's copy out of shared memory costs a memory pass. So when every rank can
map the same file, an averaging round becomes: each rank copies its tensors into its own slot,
the arrival exchange that the round already does tells every rank that all slots are written,
and each rank sums the slots itself, in rank order, so every rank gets the same bits.

The file lives in ``/dev/shm`` (else the temp folder) under a random name and is unlinked as soon
as every rank has mapped it: nothing is left behind, even when a rank dies. Ranks on other hosts
cannot find it (or find a different file: a random nonce in the header tells), and a folder too
small for ``world`` copies of the model refuses the file up front; in both cases every rank
keeps gloo.

:func:`map_shared` (the file, made once for every rank) also serves the ranks' control counters
(:mod:`flodl_ddp._shm_counters`).

Reuse is safe without a further barrier: a rank rewrites its slot at its next window end, after
the round's closing exchange, which no rank passes before every rank has read all slots.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import socket
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ._comm import Comm
from ._errors import DdpError

HEADER_BYTES = 64
"""Bytes before a shared file's payload: the nonce (16) and room to spare (keeps it aligned)."""
_ALIGN = 64  # every region starts on a cache line


def _shm_dir() -> str:
    """``/dev/shm`` where it is a writable folder (Linux: RAM-backed), else the temp folder."""
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else tempfile.gettempdir()


_QUICK_RETRIES = 200


@contextlib.contextmanager
def hold_lock(fd: int, timeout_s: float, owner: str, what: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` of a shared file through descriptor ``fd``.

    Uncontended it is one system call. A holder keeps the lock for microseconds, so a
    contended one is retried at once (yielding the core) a number of times, then with sleeps
    growing from 0.1 to 1 ms (the shortest sleep lasts ~50 us on Linux); after ``timeout_s`` a
    :class:`DdpError` says that ``owner`` waited for it over ``what``.
    """
    import fcntl  # POSIX only: callers check for flock before sharing a file

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _wait_for_lock(fd, timeout_s, owner, what)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _wait_for_lock(fd: int, timeout_s: float, owner: str, what: str) -> None:
    import fcntl

    for _ in range(_QUICK_RETRIES):
        time.sleep(0)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
    deadline = time.monotonic() + timeout_s
    pause = 1e-4
    while True:
        time.sleep(pause)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise DdpError(
                    f"{owner}: waited {timeout_s:g} s for the lock ({what}); another rank holds "
                    "it and does not let go (stopped or hung?)"
                ) from None
            pause = min(pause * 2, 1e-3)


def release_mapping(mm: mmap.mmap, fd: int) -> None:
    """Unmap a shared file and close this rank's descriptor of it (either may be gone)."""
    with contextlib.suppress(BufferError, ValueError):
        mm.close()
    with contextlib.suppress(OSError):
        os.close(fd)


def host_label() -> str:
    """The host this rank runs on, as the run knows it: the cluster file's host name under
    ``fdl @cluster`` (``FLODL_CLUSTER_HOST``), else the machine's host name."""
    return os.environ.get("FLODL_CLUSTER_HOST") or socket.gethostname()


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class SharedSlots:
    """Per-rank regions of one shared mapping (made by :meth:`open`, a collective).

    Each rank owns one slot; a slot holds one 1-D tensor per ``(numel, dtype)`` spec.
    ``slots[r][k]`` is rank ``r``'s tensor for spec ``k``, writable by every rank (by
    convention only rank ``r`` writes it).
    """

    def __init__(
        self, mm: mmap.mmap, specs: Sequence[tuple[int, torch.dtype]], world: int, path: str
    ) -> None:
        self._mm = mm  # the tensors below borrow its memory: keep it alive as long as they are
        self.path = path
        """Where the file was while the ranks mapped it (unlinked since)."""
        self.slots: list[list[Tensor]] = []
        offset = HEADER_BYTES
        for _ in range(world):
            row = []
            for numel, dtype in specs:
                size = numel * dtype.itemsize
                if numel == 0:
                    row.append(torch.empty(0, dtype=dtype))
                else:
                    row.append(torch.frombuffer(mm, dtype=dtype, count=numel, offset=offset))
                offset += _aligned(size)
            self.slots.append(row)

    @staticmethod
    def nbytes(specs: Sequence[tuple[int, torch.dtype]], world: int) -> int:
        """The mapping's size: the header, then ``world`` slots of aligned regions."""
        return HEADER_BYTES + world * sum(_aligned(n * d.itemsize) for n, d in specs)

    @classmethod
    def open(
        cls,
        comm: Comm,
        specs: Sequence[tuple[int, torch.dtype]],
        eligible: bool,
    ) -> SharedSlots | None:
        """Map one shared file on every rank, or ``None`` on every rank when any rank cannot
        (another host, no writable folder, or ``eligible`` false on some rank).

        A collective over ``comm``: every rank calls it at the same point.
        """
        shared = map_shared(comm, "shm", cls.nbytes(specs, comm.world_size), eligible)
        if shared is None:
            return None
        os.close(shared.fd)  # the mapping keeps the memory; slots need no lock
        return cls(shared.mm, specs, comm.world_size, shared.path)


@dataclass
class SharedFile:
    """One file mapped by every rank (made by :func:`map_shared`)."""

    mm: mmap.mmap
    fd: int
    """This rank's own descriptor of the file, still open (for ``flock``)."""
    path: str
    """Where the file was while the ranks mapped it (unlinked since)."""


def map_shared(comm: Comm, tag: str, size: int, eligible: bool) -> SharedFile | None:
    """A file of ``size`` bytes that rank 0 creates and every rank maps, or ``None`` on every
    rank when any rank cannot (another host, no writable folder, ``eligible`` false somewhere).
    Ranks that a cluster file puts on different hosts (:func:`host_label`) never share one, even
    when they could (network namespaces, containers sharing ``/dev/shm``): what they exchange
    then goes over the network, as between machines, and so does a failure of that network.

    A collective over ``comm`` (two exchanges named after ``tag``). The name is unlinked before
    it returns: the mappings and descriptors keep the memory, and nothing is left behind.
    """
    rank = comm.rank
    got: tuple[mmap.mmap, int] | None = None
    offer = b""
    if rank == 0 and eligible:
        with contextlib.suppress(OSError):
            mm, fd, offer = _create(size)
            got = (mm, fd)
    offers = comm.exchange_bytes(tag, offer)
    path = ""
    if offers[0]:
        info = json.loads(offers[0])
        path = info["path"]
        if rank != 0 and eligible and info["host"] == host_label():
            got = _attach(path, size, bytes.fromhex(info["nonce"]))
    oks = comm.exchange(tag + "ok", [1.0 if got is not None else 0.0])
    if rank == 0 and path:
        # every rank has mapped it or given up: the name can go, the mappings stay
        with contextlib.suppress(OSError):
            os.unlink(path)
    if got is None or not all(v[0] for v in oks):
        if got is not None:
            got[0].close()
            os.close(got[1])
        return None
    return SharedFile(got[0], got[1], path)


def _create(size: int) -> tuple[mmap.mmap, int, bytes]:
    """A new file of ``size`` bytes with a random nonce in its header, mapped; its open
    descriptor; the offer that tells the other ranks where it is."""
    fd, path = tempfile.mkstemp(prefix="flodl-ddp-", suffix=".shm", dir=_shm_dir())
    try:
        if hasattr(os, "posix_fallocate"):
            # Reserve the pages now: a full /dev/shm (64 MB in a default container) fails
            # here and the ranks keep gloo, instead of a SIGBUS at the first write mid-run.
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
        mm = mmap.mmap(fd, size)
    except OSError:
        os.close(fd)
        os.unlink(path)
        raise
    nonce = os.urandom(16)
    mm[:16] = nonce
    offer = {"path": path, "nonce": nonce.hex(), "host": host_label()}
    return mm, fd, json.dumps(offer).encode()


def _attach(path: str, size: int, nonce: bytes) -> tuple[mmap.mmap, int] | None:
    """Rank 0's file mapped here with its open descriptor, or ``None`` when it is not there
    (another host) or is not the same file (its nonce differs)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size != size:
            os.close(fd)
            return None
        mm = mmap.mmap(fd, size)
    except OSError:
        os.close(fd)
        return None
    if mm[:16] != nonce:
        mm.close()
        os.close(fd)
        return None
    return mm, fd
