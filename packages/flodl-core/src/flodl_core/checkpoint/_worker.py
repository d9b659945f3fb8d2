"""A background thread for save jobs, so a training loop does not wait on disk."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from types import TracebackType
from typing import Any, TypeVar

from .._errors import ConfigError
from .._log import logger

T = TypeVar("T")


class CpuWorker:
    """Runs submitted callables one at a time, in order, on a single background thread.

    A job's exception is never lost: the next :meth:`wait` or :meth:`close` raises it (the first
    one, with the others listed in its notes), once. Typical use::

        with CpuWorker() as worker:
            for epoch in range(n):
                train(model)
                worker.submit(ModelSnapshot.capture(model).save, f"epoch{epoch}.fdl")
        # leaving the block waits for the last save and raises if any failed
    """

    def __init__(self, name: str = "flodl-cpu-worker") -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._futures: list[Future[Any]] = []
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Queue ``fn(*args, **kwargs)``; returns its :class:`~concurrent.futures.Future`."""
        with self._lock:
            if self._closed:
                raise ConfigError("CpuWorker is closed; create a new one to submit more jobs")
            # Finished jobs that succeeded need no tracking; failed ones wait to be reported.
            self._futures = [f for f in self._futures if not f.done() or f.exception()]
            future = self._pool.submit(fn, *args, **kwargs)
            self._futures.append(future)
            return future

    @property
    def pending(self) -> int:
        """Jobs queued or running."""
        with self._lock:
            return sum(not f.done() for f in self._futures)

    def _drain(self) -> list[BaseException]:
        with self._lock:
            futures, self._futures = self._futures, []
        wait_futures(futures)
        return [e for f in futures if (e := f.exception()) is not None]

    @staticmethod
    def _raise(errors: list[BaseException]) -> None:
        if not errors:
            return
        first = errors[0]
        if len(errors) > 1 and hasattr(first, "add_note"):
            first.add_note(f"{len(errors) - 1} more background job(s) failed:")
            for e in errors[1:]:
                first.add_note(f"  {type(e).__name__}: {e}")
        raise first

    def wait(self) -> None:
        """Block until every submitted job has finished; raise the first job error, if any."""
        self._raise(self._drain())

    def close(self) -> None:
        """Finish queued jobs, stop the thread, and raise the first job error, if any."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            errors = self._drain()
        finally:
            self._pool.shutdown(wait=True)
        self._raise(errors)

    def __enter__(self) -> CpuWorker:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
            return
        # The block's own exception stays the one that propagates; job errors ride along.
        try:
            self.close()
        except BaseException as job_error:
            if hasattr(exc, "add_note"):
                exc.add_note(
                    f"a background job also failed: {type(job_error).__name__}: {job_error}"
                )
            else:
                logger.error("a background job failed: %s: %s", type(job_error).__name__, job_error)
