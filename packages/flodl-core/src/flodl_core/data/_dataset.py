"""What a loader can read: per-item ``DataSet``s, per-batch ``BatchDataSet``s, tensors.

``indices`` handed to ``get_batch`` are always a 1-D ``torch.int64`` CPU tensor: it feeds
``index_select`` / ``tensor[indices]`` directly and ``indices.tolist()`` gives plain ints.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Subset, TensorDataset

from .._errors import ConfigError, DataError, ShapeError
from ._gather import RowGather


@runtime_checkable
class DataSet(Protocol):
    """A per-item dataset: the map-style protocol of ``torch.utils.data.Dataset``.

    ``ds[i]`` returns one sample: a tensor, or a tuple of tensors / numbers / arrays (``(image,
    label)``). The loader stacks samples position by position into a batch.
    """

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


@runtime_checkable
class BatchDataSet(Protocol):
    """A per-batch dataset (preferred for in-memory, memory-mapped or pre-decoded data).

    ``get_batch(indices)`` returns one tensor per field, each ``(len(indices), ...)``, for the
    samples at ``indices`` (1-D int64 CPU tensor) in that order.
    """

    def __len__(self) -> int: ...

    def get_batch(self, indices: Tensor) -> Sequence[Tensor]: ...


def as_indices(indices: Any, n: int, what: str = "get_batch") -> Tensor:
    """``indices`` as a 1-D int64 tensor of positions in ``0..n-1``, or a clear error.

    Accepted: a 1-D integer tensor (kept on its device), a sequence or ``range`` of ints, a
    1-D integer numpy array. Refused, naming the value: 2-D or 0-d, floats, bools, negative or
    out-of-range positions.
    """
    if isinstance(indices, Tensor):
        t = indices
    elif isinstance(indices, np.ndarray):
        if indices.dtype.kind not in "iu":
            raise DataError(
                f"{what}: indices must be integers, got a numpy array of {indices.dtype}; "
                "pass e.g. np.array([0, 5, 7])"
            )
        t = torch.from_numpy(np.ascontiguousarray(indices).astype(np.int64, copy=False))
    elif isinstance(indices, (list, tuple, range)):
        bad = [v for v in indices if not isinstance(v, (int, np.integer)) or isinstance(v, bool)]
        if bad:
            raise DataError(
                f"{what}: indices must be ints, got {type(bad[0]).__name__} {bad[0]!r} "
                "in the list; pass positions like [0, 5, 7]"
            )
        t = torch.tensor(list(indices), dtype=torch.int64)
    else:
        raise DataError(
            f"{what}: indices must be a 1-D int tensor, a list of ints or a numpy int array, "
            f"got {type(indices).__name__}"
        )
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise DataError(
            f"{what}: indices must be an integer tensor, got dtype {t.dtype}; "
            "convert with .long() if they hold whole numbers"
        )
    if t.dim() != 1:
        raise DataError(
            f"{what}: indices must be 1-D (one position per sample), got shape "
            f"{tuple(t.shape)}; flatten them with .reshape(-1)"
        )
    if t.dtype != torch.int64:
        t = t.long()
    if t.numel() and t.device.type == "cpu":  # a device tensor would sync: it is checked there
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= n:
            v = lo if lo < 0 else hi
            raise DataError(
                f"{what}: index {v} is out of range for {n} samples; positions go "
                f"from 0 to {n - 1} (negative positions are not accepted)"
            )
    return t


def from_array(value: Any, what: str) -> Any:
    """A numpy array as a tensor sharing its memory (a read-only one too: the loader never
    writes to its fields); anything else as it is."""
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype.kind not in "biufc":
        raise DataError(
            f"{what} is a numpy array of {value.dtype}, which has no tensor dtype; give numbers "
            "(encode text or objects first, or read them in a BatchDataSet / collate_fn)"
        )
    if any(step < 0 for step in value.strides):  # a reversed view: torch takes no such strides
        value = np.ascontiguousarray(value)
    with warnings.catch_warnings():  # torch warns that a read-only array is not writable
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(value)


class TensorDataSet:
    """A :class:`BatchDataSet` over in-memory tensors that share their first dimension.

    ``TensorDataSet(images, labels)`` with ``images: (N, ...)`` and ``labels: (N, ...)``, tensors
    or numpy arrays (taken as tensors that share their memory). A loader targeting the tensors'
    own device uses them in place, without a copy. ``get_batch`` takes a 1-D int tensor, a list
    of ints or a numpy int array of positions. ``names`` (one non-empty string per tensor) become
    :attr:`field_names`, the loader's default batch names; :meth:`from_dict` builds the set from
    ``{"x": x, "y": y}``.
    """

    def __init__(self, *tensors: Tensor | np.ndarray, names: Sequence[str] | None = None) -> None:
        if not tensors:
            raise DataError("TensorDataSet needs at least one tensor")
        tensors = tuple(from_array(t, f"TensorDataSet field {i}") for i, t in enumerate(tensors))
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise DataError(
                    f"TensorDataSet field {i} is a {type(t).__name__}; expected a Tensor"
                )
            if t.dim() == 0:
                raise ShapeError(f"TensorDataSet field {i} is a 0-d tensor; expected (N, ...)")
        n = tensors[0].shape[0]
        for i, t in enumerate(tensors[1:], start=1):
            if t.shape[0] != n:
                raise ShapeError(
                    f"TensorDataSet field {i} has {t.shape[0]} samples on dim 0 but field 0 has "
                    f"{n}; every tensor must have the same first dimension"
                )
        self._tensors: tuple[Tensor, ...] = tuple(tensors)
        self._gather = RowGather(self._tensors)
        if names is not None:
            self.field_names = _checked_names(names, len(tensors))

    @classmethod
    def from_dict(cls, fields: Mapping[str, Tensor]) -> TensorDataSet:
        """Named fields: ``{"image": (N, ...), "label": (N, ...)}``, in insertion order.

        Keys become :attr:`field_names` (so ``batch["image"]``) and their order the positions
        (``batch[0]``), as for a tuple. Raises :class:`DataError` naming a non-string key or a
        non-tensor value, :class:`ShapeError` naming two fields whose first dimensions differ.
        """
        if not fields:
            raise DataError("a dict of fields needs at least one entry, e.g. {'x': x, 'y': y}")
        items = [(k, from_array(v, f"field {k!r}")) for k, v in fields.items()]
        for key, value in items:
            if not isinstance(key, str) or not key:
                raise DataError(
                    f"dict key {key!r} is not a field name; a dict is read as named fields "
                    "{'x': x, 'y': y} with non-empty string keys (for a dataset of samples "
                    "give a list or a map-style Dataset)"
                )
            if not isinstance(value, Tensor):
                raise DataError(
                    f"field {key!r} is a {type(value).__name__}; a dict of fields holds one "
                    f"Tensor per name, each (N, ...) (convert it with torch.as_tensor)"
                )
            if value.dim() == 0:
                raise ShapeError(f"field {key!r} is a 0-d tensor; expected (N, ...)")
        first, x0 = items[0]
        for key, value in items[1:]:
            if value.shape[0] != x0.shape[0]:
                raise ShapeError(
                    f"field {key!r} has {value.shape[0]} samples on dim 0 (shape "
                    f"{tuple(value.shape)}) but field {first!r} has {x0.shape[0]} (shape "
                    f"{tuple(x0.shape)}); every field must have the same first dimension"
                )
        return cls(*(v for _, v in items), names=[k for k, _ in items])

    #: One name per field, used by :class:`DataLoader` as the default batch names; ``None``
    #: for positional names ("0", "1", ...). Subclasses with fixed fields set it.
    field_names: tuple[str, ...] | None = None

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        """The fields, each ``(N, ...)``."""
        return self._tensors

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        """Sample ``index``: one tensor per field, e.g. ``image, label = ds[0]`` (so the set
        also feeds ``torch.utils.data.DataLoader``)."""
        if not isinstance(index, (int, np.integer)) or isinstance(index, bool):
            raise TypeError(
                f"{type(self).__name__}[...] takes an int position, got {type(index).__name__}; "
                "use get_batch(indices) for several samples"
            )
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"{type(self).__name__} index {index} is out of range for {n} samples")
        return tuple(t[index] for t in self._tensors)

    def __repr__(self) -> str:
        names = self.field_names or tuple(str(i) for i in range(len(self._tensors)))
        fields = ", ".join(
            f"{name}: {tuple(t.shape[1:])} {str(t.dtype).removeprefix('torch.')}"
            for name, t in zip(names, self._tensors, strict=True)
        )
        return f"{type(self).__name__}({len(self)} samples; {fields})"

    def __len__(self) -> int:
        return int(self._tensors[0].shape[0])

    def get_batch(self, indices: Tensor | Sequence[int] | np.ndarray) -> list[Tensor]:
        indices = as_indices(indices, len(self))
        if indices.device != self._tensors[0].device:
            indices = indices.to(self._tensors[0].device)
        return list(self._gather(indices))


def _checked_names(names: Sequence[str], width: int) -> tuple[str, ...]:
    if isinstance(names, str) or len(names) != width:
        raise DataError(f"names {names!r} must be a list of {width} strings, one per tensor")
    bad = [n for n in names if not isinstance(n, str) or not n]
    if bad:
        raise DataError(f"field name {bad[0]!r} is not a non-empty string")
    return tuple(names)


def _shape_of(value: Any) -> str:
    shape = getattr(value, "shape", None)
    return str(tuple(shape)) if shape is not None else type(value).__name__


def _stack_error(dataset: Any, positions: list[int], rows: list[Sequence[Any]], k: int) -> str:
    """Why field ``k`` of ``rows`` does not stack: the first two samples that disagree."""
    ref = _shape_of(rows[0][k])
    odd = next((i for i, row in enumerate(rows) if _shape_of(row[k]) != ref), None)
    if odd is None:
        return f"field {k} of samples {positions[0]}..{positions[-1]} does not stack"
    text = (
        f"field {k} of sample {positions[odd]} has shape {_shape_of(rows[odd][k])} but sample "
        f"{positions[0]}'s has shape {ref}; every sample's field must have the same shape"
    )
    if isinstance(dataset, list):
        # DataLoader([x, y]) is the usual way to get here: a list is read as samples.
        text += (
            f". The dataset is a list of {len(dataset)} items, and a list is read as a dataset "
            "of samples (one item per sample); to give tensors as fields, each (N, ...), pass "
            "a tuple (x, y) or a dict {'x': x, 'y': y}"
        )
    return text


def _stack_field(values: list[Any], pos: int | str) -> Tensor:
    """One field of a list of samples stacked on a new dim 0, by ``default_collate``'s rules
    (``pos``: the field's position, or its key for dict samples)."""
    first = values[0]
    if isinstance(first, Tensor):
        return torch.stack(values)
    if isinstance(first, np.ndarray):
        return torch.from_numpy(np.stack(values))
    # bool before int: bool is an int subclass, and default_collate keeps it bool.
    if isinstance(first, (bool, np.bool_)):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, numbers.Integral):
        return torch.tensor(values, dtype=torch.int64)
    if isinstance(first, numbers.Real):
        return torch.tensor(values, dtype=torch.float64)
    raise DataError(
        f"sample field {pos!r} is a {type(first).__name__}; expected a Tensor, a numpy array or "
        "a number (make the batch yourself with DataLoader(..., collate_fn=fn), as in torch)"
    )


class ItemDataSet:
    """Adapts a per-item :class:`DataSet` (any map-style ``torch.utils.data.Dataset``) to batches.

    ``get_batch`` reads ``ds[i]`` for every index and stacks each field. A sample is a tuple or
    list of fields, a single field, or a dict (as ``default_collate`` takes it): its keys, the
    same in every sample, become :attr:`field_names` once the first batch is read, so the loader
    gives ``batch["image"]``.

    ``collate_fn(samples) -> batch``, as torch's ``DataLoader`` takes it, makes each batch from
    the list of samples instead (to pad sequences to the batch's longest, say): it returns a
    tensor, a tuple or list of tensors, or a dict of tensors whose keys name the fields, each
    ``(len(samples), ...)``.
    """

    def __init__(self, dataset: Any, collate_fn: Callable[[list[Any]], Any] | None = None) -> None:
        if collate_fn is not None and not callable(collate_fn):
            raise ConfigError(
                f"collate_fn must be a function of the list of samples, got "
                f"{type(collate_fn).__name__}"
            )
        self.dataset = dataset
        self.collate_fn = collate_fn
        self.field_names: tuple[str, ...] | None = None
        self._keys: tuple[Any, ...] | None = None  # of dict samples, in the first one's order

    def __len__(self) -> int:
        return len(self.dataset)

    def get_batch(self, indices: Tensor | Sequence[int] | np.ndarray) -> list[Tensor]:
        indices = as_indices(indices, len(self))
        samples = [self.dataset[i] for i in indices.tolist()]
        if self.collate_fn is not None:
            return self._collated(samples, indices.tolist())
        if self._keys is not None or isinstance(samples[0], Mapping):
            samples = self._by_key(samples, indices.tolist())
        rows = [s if isinstance(s, (tuple, list)) else (s,) for s in samples]
        width = len(rows[0])
        if width == 0:
            raise DataError(f"sample {int(indices[0])} is an empty tuple; expected tensors")
        for i, row in zip(indices.tolist(), rows, strict=True):
            if len(row) != width:
                raise DataError(
                    f"sample {i} has {len(row)} fields but sample {int(indices[0])} has {width}; "
                    "every sample must have the same fields"
                )
        out = []
        for k in range(width):
            try:
                label = k if self._keys is None else self._keys[k]
                out.append(_stack_field([row[k] for row in rows], label))
            except (RuntimeError, ValueError, TypeError) as e:
                if isinstance(e, DataError):
                    raise
                why = _stack_error(self.dataset, indices.tolist(), rows, k)
                raise DataError(f"samples do not stack into a batch: {why}") from e
        return out

    def _collated(self, samples: list[Any], positions: list[int]) -> list[Tensor]:
        """``collate_fn(samples)`` as a list of fields, each checked to hold one row per sample
        (a dict's keys, the first batch's, name the fields)."""
        out = raw = self.collate_fn(samples)  # type: ignore[misc]
        names: Sequence[Any] = range(len(out)) if isinstance(out, (list, tuple)) else [0]
        if isinstance(out, Mapping):
            if self._keys is None:
                self._keys = tuple(out)
                self.field_names = tuple(str(k) for k in self._keys)
            if set(out) != set(self._keys):
                raise DataError(
                    f"collate_fn returned keys {sorted(map(str, out))} for the batch of sample "
                    f"{positions[0]}, where the first batch had {sorted(self.field_names or ())}"
                )
            names, out = self._keys, [out[k] for k in self._keys]
        fields = [out] if isinstance(out, Tensor) else out
        if not isinstance(fields, (list, tuple)) or not all(isinstance(t, Tensor) for t in fields):
            got = type(raw).__name__
            if isinstance(fields, (list, tuple)):
                got += " holding " + ", ".join(sorted({type(t).__name__ for t in fields}))
            raise DataError(
                f"collate_fn returned a {got}; expected a tensor, a tuple or list of tensors, "
                "or a dict of tensors (convert with torch.as_tensor)"
            )
        for name, t in zip(names, fields, strict=True):
            if t.dim() == 0 or t.shape[0] != len(samples):
                raise ShapeError(
                    f"collate_fn's field {name!r} has shape {tuple(t.shape)} for a batch of "
                    f"{len(samples)} samples: expected ({len(samples)}, ...), one row per sample"
                )
        return list(fields)

    def _by_key(self, samples: list[Any], positions: list[int]) -> list[tuple[Any, ...]]:
        """Dict samples as tuples in one key order (the first sample's); every sample must
        have the same keys."""
        if self._keys is None:
            self._keys = tuple(samples[0])
            self.field_names = tuple(str(k) for k in self._keys)
        keys = set(self._keys)
        for i, s in zip(positions, samples, strict=True):
            if not isinstance(s, Mapping) or set(s) != keys:
                got = f"keys {sorted(map(str, s))}" if isinstance(s, Mapping) else type(s).__name__
                raise DataError(
                    f"sample {i}: {got}, where the first sample had keys "
                    f"{sorted(map(str, keys))}; every sample must have the same keys"
                )
        return [tuple(s[k] for k in self._keys) for s in samples]


def as_batch_dataset(data: Any) -> BatchDataSet:
    """Any supported dataset as a :class:`BatchDataSet`.

    Accepted: a :class:`BatchDataSet`; a tuple of tensors or a single tensor, numpy arrays too
    (wrapped in a :class:`TensorDataSet`, arrays shared without a copy); a dict (any
    ``Mapping``) of named tensors, ``{"x": x, "y": y}`` (see :meth:`TensorDataSet.from_dict`);
    ``torch.utils.data.TensorDataset`` (its tensors, no copy) and a ``Subset`` of one, as
    ``random_split`` makes (its rows, copied once); any map-style dataset with
    ``__len__`` and ``__getitem__`` (samples stacked per batch).
    A ``list`` is a map-style dataset of samples, not a tuple of fields.
    """
    if isinstance(data, BatchDataSet):
        return data
    if isinstance(data, (Tensor, np.ndarray)):
        return TensorDataSet(data)
    if isinstance(data, tuple):
        return TensorDataSet(*data)
    if isinstance(data, Mapping):
        return TensorDataSet.from_dict(data)
    if isinstance(data, TensorDataset):
        return TensorDataSet(*data.tensors)
    if isinstance(data, Subset) and isinstance(
        base := as_batch_dataset(data.dataset), TensorDataSet
    ):
        rows = torch.as_tensor(list(data.indices), dtype=torch.int64)  # random_split's parts
        return TensorDataSet(*base.get_batch(rows), names=base.field_names)
    if hasattr(data, "__len__") and hasattr(data, "__getitem__"):
        return ItemDataSet(data)
    raise ConfigError(
        f"cannot load from a {type(data).__name__}; expected a BatchDataSet (len + get_batch), a "
        "map-style dataset (len + __getitem__), a tuple of tensors or a dict of named tensors"
    )


def check_fields(fields: Any, indices: Tensor, width: int | None) -> tuple[Tensor, ...]:
    """Check ``get_batch(indices)``'s result: ``width`` tensors, each ``(len(indices), ...)``."""
    if isinstance(fields, Tensor) or not isinstance(fields, (list, tuple)):
        raise DataError(
            f"get_batch returned a {type(fields).__name__}; "
            "expected a list of tensors, one per field"
        )
    if not fields:
        raise DataError("get_batch returned an empty list; expected at least one tensor")
    if width is not None and len(fields) != width:
        raise DataError(f"get_batch returned {len(fields)} tensors; earlier batches had {width}")
    n = indices.shape[0]
    for k, t in enumerate(fields):
        if not isinstance(t, Tensor):
            raise DataError(f"get_batch field {k} is a {type(t).__name__}; expected a Tensor")
        if t.dim() == 0 or t.shape[0] != n:
            raise ShapeError(
                f"get_batch field {k} has shape {tuple(t.shape)} for {n} indices; "
                f"expected ({n}, ...)"
            )
    return tuple(fields)
