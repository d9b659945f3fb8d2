"""``DataLoader.from_batch_dataset(ds)``: the loader's options set one call at a time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .._device import DeviceLike
from .._errors import ConfigError
from ._loader import DataLoader


class DataLoaderBuilder:
    """Chained options, then ``build()``. Same options and defaults as :class:`DataLoader`.

    ``DataLoader.from_batch_dataset(ds).batch_size(64).names(["image", "label"]).build()``
    """

    def __init__(self, dataset: Any) -> None:
        self._dataset = dataset
        self._options: dict[str, Any] = {}

    def batch_size(self, n: int) -> DataLoaderBuilder:
        """Samples per batch (required, > 0)."""
        self._options["batch_size"] = n
        return self

    def device(self, device: DeviceLike) -> DataLoaderBuilder:
        """Where batches are delivered (default CPU)."""
        self._options["device"] = device
        return self

    def seed(self, seed: int) -> DataLoaderBuilder:
        """Base seed of every epoch's order (default 42)."""
        self._options["seed"] = seed
        return self

    def shuffle(self, shuffle: bool = True) -> DataLoaderBuilder:
        """Reshuffle each epoch (default) or keep the dataset's order."""
        self._options["shuffle"] = shuffle
        return self

    def drop_last(self, drop: bool = True) -> DataLoaderBuilder:
        """Drop a last, short batch (the loader's default is ``False``, as in PyTorch)."""
        self._options["drop_last"] = drop
        return self

    def names(self, names: Sequence[str]) -> DataLoaderBuilder:
        """One name per field: ``batch["image"]``."""
        self._options["names"] = names
        return self

    def prefetch(self, depth: int) -> DataLoaderBuilder:
        """Fix the streaming prefetch depth (default: sized from free memory)."""
        self._options["prefetch"] = depth
        return self

    def streaming(self, on: bool = True) -> DataLoaderBuilder:
        """Always stream, never go resident; ``streaming(False)``: go resident whenever the data
        fits (a map-style dataset whose samples are fixed, too)."""
        self._options["streaming"] = bool(on)
        return self

    def num_workers(self, n: int) -> DataLoaderBuilder:
        """Read streamed batches with ``n`` threads side by side (see :class:`DataLoader`)."""
        self._options["num_workers"] = n
        return self

    def collate_fn(self, fn: Callable[[list[Any]], Any]) -> DataLoaderBuilder:
        """Make each batch from its list of samples with ``fn``, as torch's ``collate_fn``."""
        self._options["collate_fn"] = fn
        return self

    def vram_max_usage(self, fraction: float) -> DataLoaderBuilder:
        """Share of total VRAM the loader may plan to fill (default 0.90)."""
        self._options["vram_max_usage"] = fraction
        return self

    def build(self) -> DataLoader:
        """The loader; raises ``ConfigError`` / ``DataError`` naming the first bad option."""
        if "batch_size" not in self._options:
            raise ConfigError("batch_size is required: call .batch_size(n) before .build()")
        return DataLoader(self._dataset, **self._options)
