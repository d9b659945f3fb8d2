"""``DataLoader``: batches from any dataset, resident on the device when it fits, else streamed.

Build-time rule: ``get_batch([0, 1])`` is read once to learn the fields and bytes per sample.
The dataset goes *resident* (held whole on the target device, each epoch a device-side gather)
when it fits the device's budget (:mod:`._memory`), unless ``streaming=True``; otherwise, or when
going resident runs out of memory, batches are *streamed* by a background thread. A map-style
dataset streams unless ``streaming=False``: its ``__getitem__`` may draw a new random transform
at every call (torchvision's augmentations do), which a resident copy would freeze. Both modes
give the same batches in the same order for the same seed (for samples that do not change).
"""

from __future__ import annotations

import copy
import logging
import math
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._checks import check_int
from .._device import DeviceLike, resolve_device
from .._errors import ConfigError, DataError
from ._batch import Batch, name_index
from ._dataset import BatchDataSet, ItemDataSet, TensorDataSet, as_batch_dataset, check_fields
from ._memory import auto_prefetch_depth, resident_fits
from ._resident import ResidentData, VariableShapeError
from ._sampler import epoch_permutation, even_shard
from ._streaming import StreamingEpoch

if TYPE_CHECKING:
    from ._builder import DataLoaderBuilder

logger = logging.getLogger("flodl.data")


def _declared_names(dataset: Any, width: int) -> tuple[str, ...] | None:
    """The dataset's own ``field_names`` when it declares one name per field."""
    names = getattr(dataset, "field_names", None)
    ok = isinstance(names, (tuple, list)) and len(names) == width
    if ok and all(isinstance(n, str) and n for n in names):  # type: ignore[union-attr]
        return tuple(names)  # type: ignore[arg-type]
    return None


def _collating(dataset: Any, collate_fn: Any, streaming: bool | None) -> ItemDataSet:
    """``dataset``'s samples, read one by one and made into batches by ``collate_fn``."""
    source = as_batch_dataset(dataset)
    if streaming is False:
        raise ConfigError(
            "collate_fn makes each batch as it is drawn (padding to the batch's longest sample, "
            "random masking), so the loader streams: leave streaming unset with a collate_fn"
        )
    if isinstance(source, ItemDataSet):
        if source.collate_fn is not None:
            raise ConfigError("collate_fn given twice: to the ItemDataSet and to the DataLoader")
        source = source.dataset
    elif not hasattr(source, "__getitem__"):
        raise ConfigError(
            f"collate_fn takes the samples one by one, and a {type(source).__name__} has "
            "get_batch but no __getitem__ (make the batch in get_batch instead)"
        )
    return ItemDataSet(source, collate_fn)


def _is_out_of_memory(e: BaseException) -> bool:
    if isinstance(e, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


class DataLoader:
    """Batches of a dataset, epoch by epoch.

    ``dataset``: a :class:`BatchDataSet`, a map-style dataset (any ``torch.utils.data.Dataset``,
    whose samples are tuples of fields, single fields or dicts: their keys name the fields;
    ``collate_fn(samples)`` makes each batch from its list of samples instead, as in torch),
    a tuple of tensors (fields by position), a dict of tensors (fields by name, ``{"x": x, "y":
    y}``: ``batch["x"]``, and ``batch[0]`` in insertion order) or a tensor, numpy arrays taken
    for tensors. A ``list`` is a dataset of samples, one item per sample. ``batch_size`` (> 0) is
    per device. ``seed`` fixes every epoch's order: epoch ``k`` is drawn from ``seed + k``.
    ``drop_last`` defaults to ``False`` as in ``torch.utils.data.DataLoader``: every sample is
    seen, the last batch may be short. With ``drop_last=True`` a short last batch is left out
    (useful in training with BatchNorm, where a batch of one sample fails) and a warning on the
    ``flodl.data`` logger says how many samples each epoch skips. ``names`` names the fields
    (``batch["image"]``); a dict's keys, or a dataset that declares ``field_names`` (the built-in
    MNIST, CIFAR-10 and Shakespeare sets do), name them by default.
    ``prefetch`` fixes the streaming depth (else it is sized from free memory at each epoch).
    ``streaming``: ``True`` never goes resident, ``False`` goes resident whenever the data fits;
    unset, tensors and a ``BatchDataSet`` go resident when they fit and a map-style dataset
    streams (its ``__getitem__`` may transform a sample afresh at each call; give
    ``streaming=False`` when its samples are fixed). ``vram_max_usage`` is the share of *total*
    VRAM the loader may plan to fill. ``num_workers``: threads that read streamed batches side by
    side, in epoch order (``0``: the one background thread). Threads, not torch's processes:
    they run in parallel where the reading releases the GIL (file reads, image decoding, numpy,
    torch ops), not through pure-Python work.

    ``for batch in loader.epoch(k)`` runs epoch ``k``; ``for batch in loader`` runs epochs
    0, 1, 2 ... in turn. ``len(loader)`` is the number of batches per epoch, as in torch.
    """

    def __init__(
        self,
        dataset: Any,
        *,
        batch_size: int,
        device: DeviceLike = None,
        seed: int = 42,
        shuffle: bool = True,
        drop_last: bool = False,
        names: Sequence[str] | None = None,
        prefetch: int | None = None,
        streaming: bool | None = None,
        vram_max_usage: float = 0.90,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        num_workers: int = 0,
    ) -> None:
        batch_size = check_int(batch_size, "batch_size", gt=0)
        self._workers = check_int(num_workers, "num_workers", ge=0, note="threads; 0 for one")
        seed = check_int(seed, "seed", ge=0)
        if prefetch is not None:
            prefetch = check_int(prefetch, "prefetch", ge=0, note="or None for auto")
        if not isinstance(vram_max_usage, (int, float)) or not 0 < vram_max_usage <= 1:
            raise ConfigError(f"vram_max_usage must be in (0, 1], got {vram_max_usage!r}")
        if isinstance(names, str):
            raise ConfigError(f"names must be a list of strings, got the string {names!r}")
        self._device = resolve_device(device)
        if self._device.type == "cuda" and not torch.cuda.is_available():
            raise ConfigError(f"device {self._device} requested but no CUDA device is available")

        self._source: BatchDataSet = (
            as_batch_dataset(dataset)
            if collate_fn is None
            else _collating(dataset, collate_fn, streaming)
        )
        self._n = len(self._source)
        if self._n == 0:
            raise DataError(f"dataset {type(dataset).__name__} is empty; expected >= 1 sample")
        probe_idx = torch.arange(min(2, self._n))  # two samples: a mismatch shows at build
        probe = check_fields(self._source.get_batch(probe_idx), probe_idx, None)
        self._width = len(probe)
        if names is None:
            # The dataset's own names, else those its wrapper carries (a dict's keys).
            names = _declared_names(dataset, self._width) or _declared_names(
                self._source, self._width
            )
        self._names = tuple(names) if names is not None else tuple(map(str, range(self._width)))
        if len(self._names) != self._width:
            raise ConfigError(
                f"{len(self._names)} names {list(self._names)} given for a dataset of "
                f"{self._width} fields; give one name per field"
            )
        self._index = name_index(self._names)
        self._per_sample_bytes = sum(t.nbytes for t in probe) // len(probe_idx)

        self._batch_size = batch_size
        self._seed = seed
        self._shuffle = bool(shuffle)
        self._drop_last = bool(drop_last)
        self._prefetch = prefetch
        self._vram_max_usage = float(vram_max_usage)
        self._range = range(self._n)
        self._next_epoch = 0
        self._active: weakref.ref[StreamingEpoch] | None = None
        self._stream: torch.cuda.Stream | None = None
        self._check_batches()
        self._warn_dropped()

        self._resident = None if self._streams(streaming) else self._go_resident(probe)

    @classmethod
    def from_batch_dataset(cls, dataset: Any) -> DataLoaderBuilder:
        """A builder: ``DataLoader.from_batch_dataset(ds).batch_size(64).build()``."""
        from ._builder import DataLoaderBuilder

        return DataLoaderBuilder(dataset)

    def _streams(self, streaming: bool | None) -> bool:
        """The build-time rule (module doc): ``streaming`` as given, else a map-style dataset
        streams (its ``__getitem__`` may draw a fresh transform); resident data must fit."""
        if streaming is None:
            streaming = isinstance(self._source, ItemDataSet)
        if streaming:
            return True
        fits = self._already_there() or resident_fits(
            self.dataset_bytes, self._device, self._vram_max_usage
        )
        return not fits

    def _go_resident(self, probe: tuple[Tensor, ...]) -> ResidentData | None:
        try:
            return ResidentData.load(self._source, probe, self._device)
        except VariableShapeError as e:
            logger.info("data: samples vary in shape (%s); streaming instead of resident", e)
        except Exception as e:
            if not _is_out_of_memory(e):
                raise
            logger.info(
                "data: %d bytes do not fit on %s (%s); streaming instead of resident",
                self.dataset_bytes,
                self._device,
                e,
            )
            if self._device.type == "cuda":
                torch.cuda.empty_cache()
        return None

    def _already_there(self) -> bool:
        # Tensors already on the target device are resident as they are: keeping them costs
        # nothing more, whatever the budget says.
        src = self._source
        return isinstance(src, TensorDataSet) and all(t.device == self._device for t in src.tensors)

    def _warn_dropped(self) -> None:
        left = self.num_samples % self._batch_size if self._drop_last else 0
        if left:
            which = "a different" if self._shuffle else "always the same (shuffle=False)"
            logger.warning(
                "data: drop_last=True leaves out %d of %d samples every epoch (%s last %d); "
                "set drop_last=False to see them all (evaluation should)",
                left,
                self.num_samples,
                which,
                left,
            )

    def _check_batches(self) -> None:
        if self.num_batches == 0:
            raise ConfigError(
                f"{self.num_samples} samples with batch_size {self._batch_size} and "
                "drop_last=True give no batch; lower batch_size or set drop_last=False"
            )

    # ---- what it is -------------------------------------------------------------------------

    @property
    def dataset(self) -> BatchDataSet:
        """The dataset, as the :class:`BatchDataSet` the loader reads."""
        return self._source

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def shuffle(self) -> bool:
        return self._shuffle

    @property
    def drop_last(self) -> bool:
        return self._drop_last

    @property
    def names(self) -> tuple[str, ...]:
        """The field names, in position order."""
        return self._names

    @property
    def is_resident(self) -> bool:
        """Whether the whole dataset is held on the device (else batches are streamed)."""
        return self._resident is not None

    @property
    def per_sample_bytes(self) -> int:
        return self._per_sample_bytes

    @property
    def dataset_bytes(self) -> int:
        """Bytes of the whole dataset (all fields, all samples)."""
        return self._per_sample_bytes * self._n

    @property
    def index_range(self) -> range:
        """The positions of each epoch's order this loader covers (all of them unless sharded)."""
        return self._range

    @property
    def is_sharded(self) -> bool:
        return self._range != range(self._n)

    @property
    def num_samples(self) -> int:
        """Samples per epoch for this loader (its shard when sharded)."""
        return len(self._range)

    @property
    def num_batches(self) -> int:
        """Batches per epoch."""
        n, b = self.num_samples, self._batch_size
        return n // b if self._drop_last else math.ceil(n / b)

    def __len__(self) -> int:
        return self.num_batches

    @property
    def prefetch_depth(self) -> int:
        """Batches a streamed epoch keeps in flight (the fixed ``prefetch``, else sized now)."""
        if self._prefetch is not None:
            return self._prefetch
        return auto_prefetch_depth(
            self._device,
            self._per_sample_bytes * self._batch_size,
            self._vram_max_usage,
            self.num_batches,
        )

    def set_prefetch_depth(self, depth: int) -> None:
        """Fix the streaming depth (``0``: load in the consumer); ``auto_resize()`` undoes it."""
        self._prefetch = check_int(depth, "prefetch depth", ge=0)

    def auto_resize(self) -> int:
        """Size the streaming depth from free memory again at each epoch; returns the depth now."""
        self._prefetch = None
        return self.prefetch_depth

    # ---- sharding -----------------------------------------------------------------------------

    def shard(self, rank: int, world_size: int) -> DataLoader:
        """This loader restricted to rank ``rank``'s equal part of every epoch's order.

        All ranks share the seed, hence the order; parts are disjoint and equally long (see
        :func:`even_shard`). The result shares this loader's data (resident tensors included).
        """
        part = even_shard(self.num_samples, rank, world_size)
        if not part:
            raise ConfigError(
                f"{self.num_samples} samples cannot be split among {world_size} ranks"
            )
        return self.shard_range(part.start, part.stop)

    def shard_range(self, start: int, stop: int) -> DataLoader:
        """This loader restricted to positions ``start..stop-1`` of every epoch's order.

        Positions are relative to this loader's own range. For uneven splits (see
        :func:`weighted_shards`) give each rank its own range.
        """
        n = self.num_samples
        start = check_int(start, "shard start")
        stop = check_int(stop, "shard stop")
        if not 0 <= start < stop <= n:
            raise ConfigError(
                f"shard range {start}..{stop} is not within 0..{n}; "
                f"expected 0 <= start < stop <= {n}"
            )
        child = copy.copy(self)
        child._range = self._range[start:stop]
        child._active = None
        child._next_epoch = 0
        child._check_batches()
        return child

    # ---- epochs -------------------------------------------------------------------------------

    def permutation(self, epoch: int) -> Tensor:
        """The whole dataset's order in ``epoch``: ``(N,)`` int64 on the CPU, same on every rank."""
        return epoch_permutation(self._n, self._seed, epoch, self._shuffle)

    def indices(self, epoch: int) -> Tensor:
        """The sample indices this loader visits in ``epoch``, in order (``drop_last`` applied)."""
        used = self.num_batches * self._batch_size
        r = self._range
        return self.permutation(epoch)[r.start : min(r.stop, r.start + used)]

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """The batches of epoch ``epoch`` (reshuffled from ``seed + epoch``)."""
        order = self.indices(epoch)
        if self._resident is not None:
            if self._device.type != "cpu":
                order = order.to(self._device)
            return self._resident.batches(
                order, self._batch_size, self.num_batches, self._names, self._index
            )
        self.close()  # one streamed epoch at a time: a forgotten one stops here
        b = self._batch_size
        chunks = [order[i * b : (i + 1) * b] for i in range(self.num_batches)]
        if self._device.type == "cuda" and self._stream is None:
            self._stream = torch.cuda.Stream(self._device)
        it = StreamingEpoch(
            self._source,
            chunks,
            self._width,
            self._device,
            self.prefetch_depth,
            self._make_batch,
            self._stream,
            self._workers,
        )
        self._active = weakref.ref(it)
        return it

    def _make_batch(self, tensors: tuple[Tensor, ...]) -> Batch:
        return Batch._trusted(tensors, self._names, self._index)

    def __iter__(self) -> Iterator[Batch]:
        """The next epoch: 0 on the first ``iter()``, then 1, 2 ..."""
        it = self.epoch(self._next_epoch)
        self._next_epoch += 1
        return it

    def close(self) -> None:
        """Stop the streamed epoch in progress, if any."""
        active = self._active() if self._active is not None else None
        if active is not None:
            active.close()
        self._active = None

    def __repr__(self) -> str:
        mode = "resident" if self.is_resident else "streaming"
        return (
            f"DataLoader({mode} on {self._device}, {self.num_samples} samples, "
            f"batch_size={self._batch_size}, {self.num_batches} batches, names={list(self._names)})"
        )
