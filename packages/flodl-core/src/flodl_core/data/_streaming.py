"""Streaming mode: a background thread reads the next batches while the model trains.

The producer thread calls ``get_batch`` and, on CUDA, pins the result and copies it to the device
on its own stream (``non_blocking``), recording an event the consumer's stream waits on. A bounded
queue (the prefetch depth) keeps it at most that many batches ahead. With ``workers > 1`` the
producer hands whole batches to that many threads and queues them in epoch order (reads that
release the GIL, as file reads, image decoding and numpy do, then run side by side). Stopping
early (``break``, ``close()``, the iterator being dropped) stops the threads; an error in
``get_batch`` is raised in the consumer, at the batch where it happened.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from torch import Tensor

from ._batch import Batch
from ._dataset import BatchDataSet, check_fields

_POLL_S = 0.05  # how often a blocked producer re-checks the stop flag


class _End:
    pass


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_Item = tuple[tuple[Tensor, ...], Any]  # (tensors, CUDA event or None)


def _fetch(
    source: BatchDataSet,
    idx: Tensor,
    width: int,
    device: torch.device,
    stream: torch.cuda.Stream | None,
) -> _Item:
    fields = check_fields(source.get_batch(idx), idx, width)
    if device.type == "cpu":
        return tuple(t if t.device == device else t.to(device) for t in fields), None
    if stream is None:  # non-CUDA accelerators: plain copies
        return tuple(t.to(device) for t in fields), None
    with torch.cuda.stream(stream):
        # Pinned host memory makes the copy truly asynchronous; the host allocator keeps the
        # pinned block alive until the copy recorded on this stream has finished.
        moved = tuple(
            t.pin_memory().to(device, non_blocking=True) if t.device.type == "cpu" else t.to(device)
            for t in fields
        )
        event = torch.cuda.Event()
        event.record(stream)
    return moved, event


def _put(q: queue.Queue[object], item: object, stop: threading.Event) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _produce(
    source: BatchDataSet,
    chunks: Sequence[Tensor],
    width: int,
    device: torch.device,
    stream: torch.cuda.Stream | None,
    q: queue.Queue[object],
    stop: threading.Event,
    workers: int = 1,
) -> None:
    # A module-level function holding no reference to the iterator, so a dropped iterator can be
    # collected (its finalizer then stops this thread).
    try:
        batches = _fetched(source, chunks, width, device, stream, workers, stop)
        with contextlib.closing(batches):  # a stop shuts the workers down before this thread ends
            for item in batches:
                if stop.is_set() or not _put(q, item, stop):
                    return
        _put(q, _End(), stop)
    except BaseException as e:  # re-raised in the consumer
        _put(q, _Failure(e), stop)


def _fetched(
    source: BatchDataSet,
    chunks: Sequence[Tensor],
    width: int,
    device: torch.device,
    stream: torch.cuda.Stream | None,
    workers: int,
    stop: threading.Event,
) -> Iterator[_Item]:
    """The epoch's batches in order, read by ``workers`` threads (at most that many in flight)."""
    if workers <= 1:
        for idx in chunks:
            if stop.is_set():  # checked before each read: a stop reads nothing more
                return
            yield _fetch(source, idx, width, device, stream)
        return
    pool = ThreadPoolExecutor(workers, thread_name_prefix="flodl-data-worker")
    todo, pending = iter(chunks), deque[Future[_Item]]()
    try:
        for idx in itertools.islice(todo, workers):
            pending.append(pool.submit(_fetch, source, idx, width, device, stream))
        while pending and not stop.is_set():
            done = pending.popleft().result()  # in epoch order; an error is raised here
            if (idx := next(todo, None)) is not None:
                pending.append(pool.submit(_fetch, source, idx, width, device, stream))
            yield done
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # no reader outlives its epoch


def _shutdown(stop: threading.Event, q: queue.Queue[object], thread: threading.Thread) -> None:
    stop.set()
    # Drain so a producer blocked in put() wakes at once rather than at its next poll.
    while thread.is_alive():
        try:
            while True:
                q.get_nowait()
        except queue.Empty:
            pass
        thread.join(timeout=_POLL_S)


class StreamingEpoch(Iterator[Batch]):
    """One epoch of streamed batches. Iterate it; ``close()`` (or ``with``) stops it early.

    ``depth`` is the prefetch depth; ``0`` loads each batch in the consumer when asked for (with
    one worker). ``workers``: threads reading batches side by side (module doc).
    """

    def __init__(
        self,
        source: BatchDataSet,
        chunks: Sequence[Tensor],
        width: int,
        device: torch.device,
        depth: int,
        make_batch: Callable[[tuple[Tensor, ...]], Batch],
        stream: torch.cuda.Stream | None = None,
        workers: int = 1,
    ) -> None:
        self._make = make_batch
        self._device = device
        self._done = False
        self._thread: threading.Thread | None = None
        if depth == 0 and workers <= 1:
            self._sync: Iterator[Tensor] | None = iter(chunks)
            self._fetch = lambda idx: _fetch(source, idx, width, device, stream)
            return
        self._sync = None
        self._q: queue.Queue[object] = queue.Queue(maxsize=max(depth, 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_produce,
            args=(source, chunks, width, device, stream, self._q, self._stop, workers),
            name="flodl-data-prefetch",
            daemon=True,
        )
        self._thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self._q, self._thread)

    @property
    def thread(self) -> threading.Thread | None:
        """The producer thread (``None`` at depth 0)."""
        return self._thread

    def __iter__(self) -> StreamingEpoch:
        return self

    def __next__(self) -> Batch:
        if self._done:
            raise StopIteration
        if self._sync is not None:
            idx = next(self._sync, None)
            if idx is None:
                self._done = True
                raise StopIteration
            tensors, event = self._fetch(idx)
        else:
            item = self._get()
            if isinstance(item, _End):
                self.close()
                raise StopIteration
            if isinstance(item, _Failure):
                self.close()
                raise item.error
            tensors, event = item  # type: ignore[misc]
        if event is not None:
            current = torch.cuda.current_stream(self._device)
            current.wait_event(event)
            for t in tensors:
                # Allocated on the copy stream, used on this one: tell the caching allocator.
                t.record_stream(current)
        return self._make(tensors)

    def _get(self) -> object:
        assert self._thread is not None
        while True:
            try:
                return self._q.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._q.empty():
                    # Only a stopped producer ends without a sentinel: the epoch was closed.
                    return _End()

    def close(self) -> None:
        """Stop the producer thread and drop the batches it had prepared. Idempotent."""
        self._done = True
        if self._thread is not None:
            self._finalizer()

    def __enter__(self) -> StreamingEpoch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
