"""Loop traces: a loop body that publishes named values once per iteration.

A body deriving from :class:`LoopBody` implements ``step(state, refs, emit)`` instead of
``forward``; each ``emit.publish(name, value)`` appends ``value`` to the loop's trace ``name``.
The values keep their autograd history, so a loss can read them (a ponder cost, an auxiliary
loss per refinement step) through ``graph.traces(name)`` after the forward.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping

from torch import Tensor, nn

from flodl_core import ConfigError

from .._spec import tag_problem


def _check_value(node: str, name: str, value: object) -> None:
    # Traces feed losses and are detached at end_step(): a float accepted here would fail
    # far from the body that published it.
    if not isinstance(value, Tensor):
        raise ConfigError(
            f"{node}: the loop body published trace {name!r} as a {type(value).__name__}; "
            "expected a tensor (torch.as_tensor(value) makes one)"
        )


class TraceEmit:
    """What a :class:`LoopBody` publishes into during one loop call (one list per name).

    ``publish(name, value)`` appends ``value`` to trace ``name``; a name may be published at
    most once per iteration (twice is an error naming the loop and the name).
    """

    __slots__ = ("_node", "_seen", "_store")

    def __init__(self, store: dict[str, list[Tensor]], node: str) -> None:
        self._store = store
        self._node = node
        self._seen: set[str] = set()

    def publish(self, name: str, value: Tensor) -> None:
        """Append ``value`` (any tensor, autograd history kept) to the trace ``name``."""
        _check_value(self._node, name, value)
        if name in self._seen:
            raise ConfigError(
                f"{self._node}: the loop body published trace {name!r} twice in one "
                "iteration; publish each name at most once per step"
            )
        if name not in self._store:
            problem = tag_problem(name)
            if problem is not None:
                raise ConfigError(f"{self._node}: cannot publish a trace: {problem}")
            self._store[name] = []
        self._seen.add(name)
        self._store[name].append(value)

    def run_step(self, body: LoopBody, state: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        """One iteration: ``body.step(state, refs, self)`` (the generated loop calls this)."""
        self._seen.clear()
        return body.step(state, refs, self)


class _Discard(TraceEmit):
    """The emit a :class:`LoopBody` gets when called outside a loop: traces are dropped."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__({}, "loop body")

    def publish(self, name: str, value: Tensor) -> None:
        _check_value("loop body", name, value)
        problem = tag_problem(name)
        if problem is not None:
            raise ConfigError(f"loop body: cannot publish a trace: {problem}")


class LoopBody(nn.Module, metaclass=abc.ABCMeta):
    """A loop body that publishes per-iteration traces: implement ``step(state, refs, emit)``.

    ``state``: the loop state (B, ...); ``refs``: the loop's ``.using()`` refs (an empty dict
    when none); ``emit``: a :class:`TraceEmit`. Return the next state, same shape as ``state``.
    Inside ``loop_body(...)`` every published value lands in the loop's traces, read with
    ``graph.traces(name)`` / ``graph.last_trace(name)``; called directly (``body(state)``) the
    traces are dropped.
    """

    @abc.abstractmethod
    def step(self, state: Tensor, refs: Mapping[str, Tensor], emit: TraceEmit) -> Tensor:
        """One iteration: the next state; ``emit.publish(name, value)`` records a trace."""

    def forward(self, state: Tensor) -> Tensor:
        return self.step(state, {}, _Discard())

    def forward_named(self, state: Tensor, refs: Mapping[str, Tensor]) -> Tensor:
        return self.step(state, refs, _Discard())
