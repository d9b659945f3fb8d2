"""Flat names that forward to a namespace: ``graph.freeze`` is ``graph.tree.freeze``.

A :class:`Graph` groups its features in namespaces (``graph.tree``, ``graph.viz``,
``graph.metrics``, ``graph.timings``); the seed's flat names stay as :class:`Alias` descriptors.
An alias costs one attribute lookup when it is read and nothing during ``forward``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

__all__ = ["Alias"]

P = ParamSpec("P")
R = TypeVar("R")


class Alias(Generic[P, R]):
    """``name = Alias("tree", GraphTree.freeze)``: ``obj.name`` is ``obj.tree.freeze``.

    The namespace is read from the instance at access time, so any class that offers the same
    namespace attribute can reuse the descriptor (``HfModel.freeze = Graph.freeze``).
    """

    def __init__(self, namespace: str, fn: Callable[Concatenate[Any, P], R]) -> None:
        self.namespace = namespace
        self.target = fn.__name__
        self.__doc__ = f"Alias of ``{namespace}.{fn.__name__}``. {fn.__doc__ or ''}".rstrip()
        self.__wrapped__ = fn

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Alias[P, R]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Callable[P, R]: ...
    def __get__(self, obj: object, owner: type | None = None) -> Alias[P, R] | Callable[P, R]:
        if obj is None:  # class access: help(), API docs, reuse on another class
            return self
        fn: Callable[P, R] = getattr(getattr(obj, self.namespace), self.target)
        return fn

    def __repr__(self) -> str:
        return f"<alias of {self.namespace}.{self.target}>"
