from __future__ import annotations

import gc
import threading
import time

import pytest
import torch

from flodl_core import DataLoader, ShapeError
from flodl_core.data import StreamingEpoch


class Counting:
    """A BatchDataSet that counts its reads and can fail at a given one."""

    def __init__(self, n: int = 64, fail_at: int | None = None) -> None:
        self.x = torch.arange(n, dtype=torch.float32).unsqueeze(1)
        self.reads = 0
        self.fail_at = fail_at
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.x)

    def get_batch(self, indices: torch.Tensor) -> list[torch.Tensor]:
        with self.lock:
            self.reads += 1
            n = self.reads
        if self.fail_at is not None and n == self.fail_at:
            raise ValueError(f"disk read {n} failed")
        return [self.x[indices]]


def loader(ds: Counting, depth: int | None = 2) -> DataLoader:
    return DataLoader(ds, batch_size=4, streaming=True, prefetch=depth)


def wait_dead(thread: threading.Thread | None) -> None:
    assert thread is not None
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_thread_ends_with_the_epoch() -> None:
    it = loader(Counting()).epoch(0)
    assert isinstance(it, StreamingEpoch)
    assert len(list(it)) == 16
    wait_dead(it.thread)
    assert list(it) == []  # exhausted stays exhausted


def test_break_does_not_leak_the_thread() -> None:
    ld = loader(Counting())
    it = ld.epoch(0)
    thread = it.thread
    for _ in it:
        break
    del it
    gc.collect()
    wait_dead(thread)


def test_dropping_a_started_iterator_stops_its_thread() -> None:
    ld = loader(Counting())
    it = ld.epoch(0)
    next(it)
    thread = it.thread
    del it  # CPython frees it here: its finalizer stops the producer
    wait_dead(thread)


def test_close_and_context_manager() -> None:
    ld = loader(Counting())
    with ld.epoch(0) as it:
        next(it)
        thread = it.thread
    wait_dead(thread)
    with pytest.raises(StopIteration):
        next(it)
    it2 = ld.epoch(1)
    next(it2)
    it2.close()
    it2.close()  # idempotent
    wait_dead(it2.thread)


def test_a_new_epoch_stops_a_forgotten_one() -> None:
    ld = loader(Counting())
    first = ld.epoch(0)
    next(first)
    second = ld.epoch(1)
    wait_dead(first.thread)
    assert len(list(second)) == 16
    ld.close()


def test_worker_error_is_raised_in_the_consumer() -> None:
    ds = Counting(fail_at=4)  # read 1 is the build probe, so batch 2 fails
    it = loader(ds).epoch(0)
    got = [next(it), next(it)]
    with pytest.raises(ValueError, match="disk read 4 failed"):
        next(it)
    wait_dead(it.thread)
    assert [b[0].shape[0] for b in got] == [4, 4]
    with pytest.raises(StopIteration):
        next(it)


def test_bad_batches_from_the_worker_are_checked() -> None:
    class Short(Counting):
        def get_batch(self, indices: torch.Tensor) -> list[torch.Tensor]:
            out = super().get_batch(indices)
            return out if self.reads < 3 else [out[0][:1]]

    it = loader(Short()).epoch(0)
    next(it)
    with pytest.raises(ShapeError, match=r"shape \(1, 1\) for 4 indices"):
        next(it)


def test_producer_stays_within_the_prefetch_depth() -> None:
    ds = Counting(n=400)
    it = loader(ds, depth=3).epoch(0)
    next(it)
    time.sleep(0.3)  # give the producer every chance to run ahead
    # probe + the batch consumed + 3 queued + 1 blocked in put()
    assert ds.reads <= 1 + 1 + 3 + 1
    it.close()


def test_depth_zero_loads_in_the_consumer() -> None:
    ds = Counting()
    it = loader(ds, depth=0).epoch(0)
    assert it.thread is None
    assert ds.reads == 1  # just the build probe: nothing read ahead
    next(it)
    assert ds.reads == 2
    assert len(list(it)) == 15


def test_depth_zero_errors_surface_directly() -> None:
    it = loader(Counting(fail_at=2), depth=0).epoch(0)
    with pytest.raises(ValueError, match="disk read 2 failed"):
        next(it)


# ---- num_workers: reader threads ----------------------------------------------------------------


class Jittery(torch.utils.data.Dataset):
    """Samples whose reads take uneven times, so the workers finish out of order."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.002 * ((i * 7) % 5))
        return torch.full((2,), float(i)), i


def _workers_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("flodl-data-worker")]


@pytest.mark.parametrize("depth", [0, 3])
def test_worker_threads_keep_the_epoch_order(depth: int) -> None:
    one = DataLoader(Jittery(), batch_size=4, seed=5, prefetch=depth)
    many = DataLoader(Jittery(), batch_size=4, seed=5, prefetch=depth, num_workers=3)
    assert [b[1].tolist() for b in many.epoch(2)] == [b[1].tolist() for b in one.epoch(2)]
    assert not _workers_alive()


def test_worker_threads_read_batches_side_by_side() -> None:
    barrier, armed = threading.Barrier(2, timeout=10), threading.Event()

    class Meeting(Jittery):
        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            if armed.is_set() and i in (0, 4):  # batches 0 and 1 wait for each other
                barrier.wait()
            return torch.zeros(2), i

    loader = DataLoader(Meeting(), batch_size=4, shuffle=False, num_workers=2)
    armed.set()  # after the loader read its two samples at build
    assert len(list(loader.epoch(0))) == 12  # one reader alone would break the barrier


class FailsAt16(Jittery):
    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i == 16:
            raise OSError("sample 16 is unreadable")
        return super().__getitem__(i)


def test_a_worker_error_arrives_at_its_batch_and_stops_the_workers() -> None:
    it = DataLoader(FailsAt16(), batch_size=4, shuffle=False, num_workers=3).epoch(0)
    seen = []
    with pytest.raises(OSError, match="sample 16 is unreadable"):
        for batch in it:
            seen.append(batch[1].tolist())
    assert seen == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    wait_dead(it.thread)
    assert not _workers_alive()


def test_closing_early_stops_the_workers() -> None:
    it = DataLoader(Jittery(), batch_size=4, num_workers=3).epoch(0)
    next(it)
    it.close()
    wait_dead(it.thread)
    assert not _workers_alive()
