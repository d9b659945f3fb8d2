"""The launching process's view of a run: :class:`DdpHandle` and its result, :class:`TrainedState`.

One background thread feeds the handle (calling ``metrics_fn`` and the monitor as each epoch
arrives); the user reads it from theirs.
"""

from __future__ import annotations

import contextlib
import io
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from flodl_core import plain_name
from flodl_monitor import Monitor

from ._errors import DdpError
from ._metrics import EpochMetrics, Progress, close_ranks, publish

logger = logging.getLogger("flodl.ddp")

_END = object()


@dataclass
class TrainedState:
    """The trained model: parameters and buffers by plain ``state_dict`` name, as CPU tensors
    (the replicas agree after the last averaging; with ``easgd_alpha``: its consensus)."""

    params: dict[str, Tensor]
    buffers: dict[str, Tensor]

    def state_dict(self) -> dict[str, Tensor]:
        """Parameters and buffers in one dict, for a plain model's ``load_state_dict``."""
        return {**self.params, **self.buffers}

    def load_into(self, model: nn.Module) -> None:
        """Copy the state into ``model`` (same architecture, compiled or not: names are plain,
        see :func:`~flodl_core.plain_name`), or refuse it before copying any."""
        state = self.state_dict()
        own = {plain_name(k): (k, t) for k, t in model.state_dict().items()}
        missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
        shapes = [k for k, (_, t) in own.items() if k in state and state[k].shape != t.shape]
        if missing or unexpected or shapes:
            raise DdpError(
                f"TrainedState does not match {type(model).__name__}: missing {missing}, "
                f"unexpected {unexpected}, other shapes {shapes}; nothing was loaded"
            )
        model.load_state_dict({own[k][0]: t for k, t in state.items()})


def state_of(model: nn.Module, consensus: Sequence[Tensor] | None = None) -> TrainedState:
    """``model.state_dict()`` as CPU copies by plain name, parameters apart: a tied tensor under
    each of its names, no non-persistent buffer. ``consensus``: one tensor per
    ``model.parameters()`` to report in their place (EASGD's)."""
    swap = dict(zip(map(id, model.parameters()), consensus, strict=True)) if consensus else {}
    names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    out: tuple[dict[str, Tensor], dict[str, Tensor]] = ({}, {})  # parameters, buffers
    for k, t in model.state_dict(keep_vars=True).items():
        if isinstance(t, Tensor):  # not a module's extra state
            out[k not in names][plain_name(k)] = swap.get(id(t), t).detach().to("cpu", copy=True)
    return TrainedState(*out)


class DdpHandle:
    """A run in progress (returned by ``Trainer.builder(...).run()``): its epochs
    (:meth:`next_metrics`, :meth:`poll_metrics`), its end (:meth:`join`: the trained state, or a
    :class:`DdpError` naming the failed rank, its host and traceback), :meth:`timeline`.
    ``record_log`` and ``save_dashboard`` go through ``monitor``, or a silent one."""

    def __init__(
        self,
        world_size: int,
        devices: list[str],
        *,
        metrics_fn: Callable[[EpochMetrics], None] | None = None,
        monitor: Any = None,
        record_log: str | None = None,
        save_dashboard: str | None = None,
        epochs: int = 1,
    ) -> None:
        self._world_size, self._devices, self._metrics_fn = world_size, list(devices), metrics_fn
        if monitor is None and (record_log or save_dashboard):
            monitor = Monitor(epochs, stream=io.StringIO(), resources=False)
        if record_log:
            monitor.record_log(record_log)
        self._monitor, self._dashboard = monitor, save_dashboard
        self._attach(None)  # none of the three yet
        self.events: list[dict[str, Any]] = []
        """Elastic runs: what happened to the ranks, in order (see :class:`ElasticHandle`)."""
        self.fingerprints: dict[int, list[float]] = {}
        self.reports: list[Progress] = []
        """Progress reports within epochs, in order (``reports_per_epoch``)."""
        self._queue: queue.Queue[Any] = queue.Queue()
        self._history: list[EpochMetrics] = []
        self._done, self._ended, self._stop_asked = threading.Event(), False, False
        self._state: TrainedState | None = None
        self._error: BaseException | None = None
        self._timeline: Any = None  # the merged Timeline, when asked for

    def _attach(self, supervisor: Any, keep: Any = None, ask_stop: Any = None) -> None:
        """A spawned run's supervisor, what must live as long as the run (its store), how to ask
        its ranks to stop after an epoch."""
        self._supervisor, self._keep, self._ask_stop = supervisor, keep, ask_stop

    def _push_progress(self, p: Progress) -> None:
        self.reports.append(p)

    def _push_metrics(self, m: EpochMetrics) -> None:
        self._history.append(m)
        if self._monitor is not None:
            try:
                publish(self._monitor, m)
            except Exception:
                logger.exception("ddp: publishing epoch %d to the monitor failed", m.epoch)
        if self._metrics_fn is not None:
            try:
                self._metrics_fn(m)
            except Exception:  # a reporting callback must not stop the training
                logger.exception("ddp: metrics_fn raised on epoch %d; training continues", m.epoch)
        self._queue.put(m)

    def _finish(self, state: TrainedState | None, timeline: Any = None) -> None:
        self._state, self._timeline = state, timeline
        if self._monitor is not None:
            close_ranks(self._monitor, self._history)
            if self._dashboard:
                try:
                    self._monitor.save_dashboard(self._dashboard)
                except Exception:
                    logger.exception("ddp: writing the dashboard to %s failed", self._dashboard)
        self._fail(None)

    def _fail(self, error: BaseException | None) -> None:
        """End the run: failed with ``error``, or done (``None``, from :meth:`_finish`)."""
        self._error = error
        self._done.set()
        self._queue.put(_END)

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def devices(self) -> list[str]:
        """One device per rank, as strings."""
        return list(self._devices)

    @property
    def done(self) -> bool:
        """Whether the run has ended (successfully or not)."""
        return self._done.is_set()

    def next_metrics(self, timeout: float | None = None) -> EpochMetrics | None:
        """The next epoch's metrics, blocking (``TimeoutError`` after ``timeout`` s); ``None``
        once the run has ended (then :meth:`join` gives the result or raises the failure)."""
        try:
            return self._take(True, timeout)
        except queue.Empty:
            raise TimeoutError(f"no epoch metrics within {timeout} s") from None

    def poll_metrics(self) -> list[EpochMetrics]:
        """Every epoch's metrics that arrived since the last read, without blocking."""
        out: list[EpochMetrics] = []
        with contextlib.suppress(queue.Empty):
            while (m := self._take(False)) is not None:
                out.append(m)
        return out

    def _take(self, block: bool, timeout: float | None = None) -> EpochMetrics | None:
        """The next queued epoch; ``None`` after the end; ``queue.Empty`` when none came."""
        if self._ended:
            return None
        item = self._queue.get(block, timeout)
        self._ended = item is _END
        return None if self._ended else item

    @property
    def history(self) -> list[EpochMetrics]:
        """Every epoch's metrics so far, whatever was read through the queue."""
        return list(self._history)

    def join(self, timeout: float | None = None) -> TrainedState:
        """Wait for the run to end; the trained state, or :class:`DdpError` for a failed run."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the run did not end within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._state is not None
        return self._state

    def stop(self, after_epoch: bool = False) -> None:
        """Tear the run down now (its ranks are killed, :meth:`join` raises); ``after_epoch``:
        end it after the epoch in progress, on every rank (:meth:`join` returns the state)."""
        if after_epoch and self._ask_stop is None and self._supervisor is not None:
            raise DdpError("an elastic run cannot stop after an epoch; stop() ends it now")
        if after_epoch:
            self._stop_asked = True  # an in-process rank without its channel yet asks on start
            if self._ask_stop is not None:
                self._ask_stop()
        elif self._supervisor is not None and not self._done.is_set():
            self._supervisor.stop()

    def rank_pid(self, rank: int) -> int | None:
        """The process id of rank ``rank``'s current process (spawned runs)."""
        return self._supervisor.procs[rank].pid if self._supervisor else None

    def alive_ranks(self) -> list[int]:
        """Ranks whose current process is running (spawned runs)."""
        procs = self._supervisor.procs if self._supervisor else []
        return [r for r, p in enumerate(procs) if p.exitcode is None]

    def all_pids(self) -> list[int]:
        """Every rank process started so far (for cleanup checks)."""
        procs = self._supervisor.all_procs if self._supervisor else []
        return [p.pid for p in procs if p.pid is not None]

    def timeline(self) -> Any:
        """The merged :class:`Timeline` of every rank, or ``None`` (not asked for, or not ended)."""
        return self._timeline
