"""The sub-builders returned by ``loop_body`` and ``map``; their final call returns the
``FlowBuilder``. They add their node through ``FlowBuilder._attach`` only."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from flodl_core import BuildError

from .nodes._loop import Loop, LoopMode
from .nodes._map import Map, MapMode

if TYPE_CHECKING:
    from ._builder import FlowBuilder


def _count_ok(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _unfinished(call: str, finishers: str, name: str) -> BuildError:
    """The error for a FlowBuilder method called on a sub-builder that was never finished."""
    return BuildError(
        [
            f"{call}.{name}(): the {call} is not finished; call {finishers} on it first "
            f"(it returns the FlowBuilder, which has {name}())"
        ]
    )


class LoopBuilder:
    """``loop_body(body)`` awaiting its iteration rule."""

    def __init__(self, fb: FlowBuilder, body: nn.Module) -> None:
        self._fb = fb
        self._body = body

    def _finish(self, mode: LoopMode, call: str, count: object, cond: object) -> FlowBuilder:
        # while/until need a condition module: a None there would build a loop with no
        # halting rule, failing only at its first forward.
        mods = (self._body,) if mode == "for" else (self._body, cond)
        problem = None
        if not _count_ok(count):
            what = "n" if mode == "for" else "max_iter"
            problem = f"{what} must be an int >= 1, got {count!r}"
        return self._fb._attach(
            call,
            mods,
            lambda: Loop(self._body, mode, count, cond),  # type: ignore[arg-type]
            problem=problem,
        )

    def __getattr__(self, name: str) -> object:
        # Only reached for attributes the class lacks: a FlowBuilder method (build, through,
        # ...) called before the loop's iteration rule gets the fix, not an AttributeError.
        from ._builder import FlowBuilder

        if not name.startswith("_") and hasattr(FlowBuilder, name):
            rules = "for_n(n), while_cond(...) or until_cond(...)"
            raise _unfinished("loop_body(...)", rules, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def for_n(self, n: int) -> FlowBuilder:
        """Exactly ``n`` iterations (gradients flow through all of them)."""
        return self._finish("for", f"loop_body(...).for_n({n!r})", n, None)

    def while_cond(self, cond: nn.Module, max_iter: int) -> FlowBuilder:
        """Before each iteration, halt if ``cond(state)[0] > 0``; 0..max_iter iterations."""
        return self._finish(
            "while", f"loop_body(...).while_cond(..., {max_iter!r})", max_iter, cond
        )

    def until_cond(self, cond: nn.Module, max_iter: int) -> FlowBuilder:
        """After each iteration (but the last allowed), halt if ``cond(state)[0] > 0``;
        1..max_iter iterations."""
        return self._finish(
            "until", f"loop_body(...).until_cond(..., {max_iter!r})", max_iter, cond
        )


class MapBuilder:
    """``map(body)`` awaiting what to iterate over."""

    def __init__(self, fb: FlowBuilder, body: nn.Module) -> None:
        self._fb = fb
        self._body = body
        self._batched = False

    def __getattr__(self, name: str) -> object:
        from ._builder import FlowBuilder

        if not name.startswith("_") and hasattr(FlowBuilder, name):
            raise _unfinished("map(...)", "each(), over(tag) or slices(n)", name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def batched(self) -> MapBuilder:
        """Call the body once on all rows instead of once per row."""
        self._batched = True
        return self

    def _finish(
        self, mode: MapMode, call: str, n: int = 1, source: str | None = None
    ) -> FlowBuilder:
        batched = self._batched
        return self._fb._attach(
            call, [self._body], lambda: Map(self._body, mode, batched, n), source=source
        )

    def each(self) -> FlowBuilder:
        """Run the body on each 1-row slice along dim 0 and concatenate."""
        return self._finish("each", "map(...).each()")

    def over(self, tag: str) -> FlowBuilder:
        """Like ``each`` but over the tensor tagged ``tag`` (defined earlier); the result
        replaces the stream."""
        call = f"map(...).over({tag!r})"
        source = self._fb._tag_node(tag)
        if source is None:
            return self._fb._fail(
                call,
                f"no tag {tag!r} defined earlier (map.over needs a backward tag); "
                f"known tags: {self._fb._known_tags() or '(none)'}",
            )
        return self._finish("over", call, source=source)

    def slices(self, n: int) -> FlowBuilder:
        """Split the last dim into ``n`` slices, map the body over them, join them back."""
        call = f"map(...).slices({n!r})"
        if not _count_ok(n):
            return self._fb._fail(call, f"n must be an int >= 1, got {n!r}")
        return self._finish("slices", call, n=n)
