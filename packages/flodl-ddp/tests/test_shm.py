"""Same-host shared slots (:mod:`flodl_ddp._shm`): ranks as threads over one in-memory store."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import flodl_ddp._shm as shm
from flodl_ddp._average import Averager
from flodl_ddp._comm import Comm
from flodl_ddp._reduce import SharedReducer
from flodl_ddp._shm import SharedSlots, _attach, _create

sys.path.insert(0, str(Path(__file__).parent))
from rank_harness import thread_ranks

SPECS = [(5, torch.float32), (3, torch.float64), (0, torch.float32)]


def test_every_rank_sees_every_slot_and_no_file_is_left() -> None:
    def body(comm: Comm) -> SharedSlots | None:
        slots = SharedSlots.open(comm, SPECS, eligible=True)
        assert slots is not None
        slots.slots[comm.rank][0].fill_(comm.rank + 1.0)
        slots.slots[comm.rank][1].fill_(10.0 * comm.rank)
        comm.barrier()
        return slots

    a, b, c = thread_ranks(3, body)
    assert not os.path.exists(a.path)
    for view in (a, b, c):
        assert [s[0].tolist() for s in view.slots] == [[1.0] * 5, [2.0] * 5, [3.0] * 5]
        assert [s[1].tolist() for s in view.slots] == [[0.0] * 3, [10.0] * 3, [20.0] * 3]
        assert [s[2].numel() for s in view.slots] == [0, 0, 0]
        assert view.slots[1][1].dtype == torch.float64


def test_regions_are_aligned_and_disjoint() -> None:
    # header, then per rank: 5 floats -> 64 bytes, 3 doubles -> 64 bytes, nothing -> 0
    assert SharedSlots.nbytes(SPECS, 2) == 64 + 2 * 128
    slots = thread_ranks(2, lambda comm: SharedSlots.open(comm, SPECS, eligible=True))[0]
    ptrs = [t.data_ptr() for row in slots.slots for t in row[:2]]
    assert all(p % 64 == 0 for p in ptrs)
    assert len(set(ptrs)) == 4


def test_one_ineligible_rank_makes_every_rank_keep_gloo() -> None:
    got = thread_ranks(2, lambda comm: SharedSlots.open(comm, SPECS, eligible=comm.rank == 0))
    assert got == [None, None]


def test_rank_zero_ineligible_offers_nothing() -> None:
    got = thread_ranks(2, lambda comm: SharedSlots.open(comm, SPECS, eligible=comm.rank != 0))
    assert got == [None, None]


@pytest.mark.parametrize(("labels", "shared"), [(["a", "b"], False), (["a", "a"], True)])
def test_ranks_a_cluster_puts_on_different_hosts_never_share_memory(
    monkeypatch: pytest.MonkeyPatch, labels: list[str], shared: bool
) -> None:
    """Two "hosts" of one machine (network namespaces, say) could map the file; the cluster
    file says they are apart, so they keep the network, and its failures."""
    mine = threading.local()
    monkeypatch.setattr(shm, "host_label", lambda: mine.label)

    def body(comm: Comm) -> bool:
        mine.label = labels[comm.rank]
        return SharedSlots.open(comm, SPECS, eligible=True) is not None

    assert thread_ranks(2, body) == [shared, shared]


def test_the_host_label_is_the_cluster_host_when_there_is_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    monkeypatch.delenv("FLODL_CLUSTER_HOST", raising=False)
    assert shm.host_label() == socket.gethostname()
    monkeypatch.setenv("FLODL_CLUSTER_HOST", "gpu-box-2")
    assert shm.host_label() == "gpu-box-2"


def test_a_different_file_under_the_same_name_is_refused(tmp_path: Any) -> None:
    mm, offer = _create(128)
    path = json.loads(offer)["path"]
    try:
        assert _attach(path, 128, bytes(16)) is None  # another nonce: not rank 0's file
        assert _attach(path, 256, mm[:16]) is None  # another size
        assert _attach(str(tmp_path / "absent"), 128, mm[:16]) is None  # another host
        same = _attach(path, 128, mm[:16])
        assert same is not None
        same[20:24] = b"abcd"
        assert mm[20:24] == b"abcd"  # one memory, two mappings
        same.close()
    finally:
        mm.close()
        os.unlink(path)


def test_only_this_runs_own_files_are_attached(tmp_path: Any) -> None:
    """A rank maps nothing but a regular ``flodl-ddp-*.shm`` file of the shared-memory folder,
    owned by this user and writable by nobody else: not a planted link, not another folder's
    file, not a world-writable one (whatever its header says)."""
    mm, offer = _create(128)
    path = json.loads(offer)["path"]
    nonce = mm[:16]
    folder = os.path.dirname(path)
    link = os.path.join(folder, f"flodl-ddp-link-{os.getpid()}.shm")
    elsewhere = tmp_path / "flodl-ddp-copy.shm"
    try:
        os.symlink(path, link)
        assert _attach(link, 128, nonce) is None  # a link, even to the right file
        elsewhere.write_bytes(bytes(mm[:128]))
        assert _attach(str(elsewhere), 128, nonce) is None  # not the shared-memory folder
        os.chmod(path, 0o666)
        assert _attach(path, 128, nonce) is None  # others may write it
        os.chmod(path, 0o600)
        assert _attach(path, 128, nonce) is not None
        real_uid = os.getuid()
        shm_uid = shm.os.getuid
        try:
            shm.os.getuid = lambda: real_uid + 1  # type: ignore[assignment]
            assert _attach(path, 128, nonce) is None  # another user's file
        finally:
            shm.os.getuid = shm_uid  # type: ignore[assignment]
    finally:
        mm.close()
        os.unlink(path)
        if os.path.lexists(link):
            os.unlink(link)


@pytest.mark.parametrize("world", [2, 3])
def test_averager_sums_the_slots_like_a_hand_computation(world: int) -> None:
    """The shared-memory round of :class:`Averager` on thread ranks: weighted parameters,
    equal-weight float buffers, integer buffers rounded back."""
    counts = [r + 1 for r in range(world)]
    weights = [c / sum(counts) for c in counts]
    barrier = threading.Barrier(world)

    def body(comm: Comm) -> dict[str, Any]:
        m = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
        with torch.no_grad():
            for p in m.parameters():
                p.fill_(comm.rank + 1.0)
            m[1].running_var.fill_(float(comm.rank))
            m[1].num_batches_tracked.fill_(4 * comm.rank + 1)
        avg = Averager(m, on_host=True)
        slots = SharedSlots.open(comm, avg.specs(), eligible=True)
        assert slots is not None
        avg.reducer = SharedReducer(slots, comm.rank)
        assert avg.shared
        avg.stage()
        barrier.wait()
        div = avg.average(weights, range(world), comm.rank)
        barrier.wait()
        return {
            "w": m[0].weight.flatten().tolist(),
            "var": m[1].running_var.tolist(),
            "n": int(m[1].num_batches_tracked),
            "div": div,
            "bytes": avg.bytes_sent,
        }

    got = thread_ranks(world, body)
    expect = sum(c * (r + 1) for r, c in enumerate(counts)) / sum(counts)
    mean_rank = (world - 1) / 2
    tracked = round(sum(4 * r + 1 for r in range(world)) / world)
    for r, res in enumerate(got):
        assert res["w"] == pytest.approx([expect] * 4, abs=1e-6)
        assert res["var"] == pytest.approx([mean_rank] * 2)
        assert res["n"] == tracked
        assert res["div"] == pytest.approx(abs(r + 1 - expect) / expect, rel=1e-5)
        assert res["bytes"] == (10 + 4) * 4 + 1 * 8  # params + float buffers, one int buffer
    assert got[0]["w"] == got[-1]["w"]  # bit-identical on every rank


def test_a_full_shm_folder_keeps_gloo_and_leaves_no_file(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """posix_fallocate failing (a full /dev/shm) is refused up front, not a SIGBUS later."""
    import errno

    import flodl_ddp._shm as shm

    monkeypatch.setattr(shm, "_shm_dir", lambda: str(tmp_path))

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    got = thread_ranks(2, lambda comm: SharedSlots.open(comm, SPECS, eligible=True))
    assert got == [None, None]
    assert list(tmp_path.iterdir()) == []
