"""``Batch``: the tensors of one batch, reachable by position and by name."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from .._checks import check_int
from .._device import DeviceLike, resolve_device
from .._errors import ConfigError, PathError


def name_index(names: Sequence[str]) -> dict[str, int]:
    """``{name: position}`` for a list of batch names; rejects empty, non-str and repeated names."""
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str) or not name:
            raise ConfigError(f"batch name {i} is {name!r}; expected a non-empty string")
        if name in index:
            raise ConfigError(f"batch name {name!r} is given twice; names must be unique")
        index[name] = i
    return index


class Batch:
    """The tensors of one batch, in dataset order, each with a name.

    ``batch[0]`` is positional, ``batch["image"]`` named; ``x, y = batch`` unpacks. Names come from
    the loader's ``names`` option, else they are ``"0"``, ``"1"``, ... Every tensor has the batch
    on dim 0: ``batch["image"]: (B, ...)``.
    """

    __slots__ = ("_index", "_names", "_tensors")

    def __init__(self, tensors: Sequence[Tensor], names: Sequence[str] | None = None) -> None:
        tensors = tuple(tensors)
        names = tuple(names) if names is not None else tuple(str(i) for i in range(len(tensors)))
        if len(names) != len(tensors):
            raise ConfigError(f"Batch got {len(tensors)} tensors but {len(names)} names")
        self._tensors = tensors
        self._names = names
        self._index = name_index(names)

    @classmethod
    def _trusted(
        cls, tensors: tuple[Tensor, ...], names: tuple[str, ...], index: dict[str, int]
    ) -> Batch:
        # The loader builds one batch per step: skip re-validating names it checked at build.
        batch = cls.__new__(cls)
        batch._tensors, batch._names, batch._index = tensors, names, index
        return batch

    @property
    def names(self) -> tuple[str, ...]:
        """The names, in position order."""
        return self._names

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """The tensors, in position order."""
        return self._tensors

    def __len__(self) -> int:
        return len(self._tensors)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(self._tensors)

    def __getitem__(self, key: int | str) -> Tensor:
        if isinstance(key, str):
            pos = self._index.get(key)
            if pos is None:
                raise PathError(f"batch has no tensor named {key!r}", valid=self._names)
            return self._tensors[pos]
        if isinstance(key, int) and not isinstance(key, bool):
            n = len(self._tensors)
            if not -n <= key < n:
                raise IndexError(f"batch position {key} is out of range for {n} tensors")
            return self._tensors[key]
        raise TypeError(f"batch keys are int positions or str names, got {type(key).__name__}")

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._index

    def has(self, name: str) -> bool:
        """Whether a tensor is named ``name``."""
        return name in self._index

    def get(self, name: str, default: Tensor | None = None) -> Tensor | None:
        """The tensor named ``name``, or ``default``."""
        pos = self._index.get(name)
        return default if pos is None else self._tensors[pos]

    def as_dict(self) -> dict[str, Tensor]:
        """``{name: tensor}`` in position order."""
        return dict(zip(self._names, self._tensors, strict=True))

    def to(self, device: DeviceLike, non_blocking: bool = False) -> Batch:
        """The same batch with every tensor on ``device``."""
        dev = resolve_device(device)
        moved = tuple(t.to(dev, non_blocking=non_blocking) for t in self._tensors)
        return Batch._trusted(moved, self._names, self._index)

    def split(self, parts: int) -> list[Batch]:
        """The batch cut along dim 0 into ``parts`` consecutive batches with the same names, their
        sizes as equal as they can be (``torch.tensor_split``; views, no copy): micro-batches
        whose gradients add up to the whole batch's. ``split(1)`` is ``[self]``."""
        n = check_int(parts, "parts", ge=1)
        rows = len(self._tensors[0]) if self._tensors else 0
        if n > rows:
            raise ConfigError(f"cannot split a batch of {rows} samples into {n} parts")
        if n == 1:
            return [self]
        cut = [torch.tensor_split(t, n) for t in self._tensors]
        return [
            Batch._trusted(tuple(c[i] for c in cut), self._names, self._index) for i in range(n)
        ]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Batch):
            return NotImplemented
        return self._names == other._names and all(
            a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
            for a, b in zip(self._tensors, other._tensors, strict=True)
        )

    __hash__ = None  # type: ignore[assignment]  # equality is by value, like a tensor's

    def __repr__(self) -> str:
        parts = [
            f"{name}={tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}"
            for name, t in zip(self._names, self._tensors, strict=True)
        ]
        return f"Batch({', '.join(parts)})"
