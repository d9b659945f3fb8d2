from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset, Subset

from flodl_core import ConfigError, DataError, DataLoader, ShapeError
from flodl_core.data import Batch, ItemDataSet, TensorDataSet


def tensors(n: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, 3, 4, generator=g), torch.arange(n)


class Items(Dataset):
    """Per-item view of the same data, read through ``__getitem__``."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.x[i], int(self.y[i])


class Ragged:
    """A BatchDataSet padding each batch to its own width: it cannot be held as one tensor."""

    def __len__(self) -> int:
        return 20

    def get_batch(self, indices: torch.Tensor) -> list[torch.Tensor]:
        width = 1 + int(indices.max()) // 8
        return [indices.float().unsqueeze(1).expand(-1, width).clone()]


class OomWhenWhole:
    """Runs out of memory on reads larger than a batch, as a too-big resident load would."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, limit: int) -> None:
        self.x, self.y, self.limit = x, y, limit

    def __len__(self) -> int:
        return len(self.x)

    def get_batch(self, indices: torch.Tensor) -> list[torch.Tensor]:
        if len(indices) > self.limit:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 9 GiB")
        return [self.x[indices], self.y[indices]]


def epochs(loader: DataLoader, *ks: int) -> list[list[Batch]]:
    return [list(loader.epoch(k)) for k in ks]


def test_resident_batches_follow_the_seeded_permutation() -> None:
    x, y = tensors()
    loader = DataLoader((x, y), batch_size=8, names=["image", "label"], drop_last=True)
    assert loader.is_resident and len(loader) == 6 == loader.num_batches
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(42 + 2))
    for b, batch in enumerate(loader.epoch(2)):
        idx = perm[b * 8 : (b + 1) * 8]
        assert torch.equal(batch["image"], x[idx]) and torch.equal(batch[1], y[idx])
        assert batch.names == ("image", "label")


def test_shuffles_are_reproducible_per_epoch() -> None:
    x, y = tensors()
    a = DataLoader((x, y), batch_size=8, seed=7)
    b = DataLoader((x, y), batch_size=8, seed=7)
    assert epochs(a, 0, 1, 2) == epochs(b, 0, 1, 2)
    assert epochs(a, 0) != epochs(a, 1)
    # Epoch k comes from seed + k.
    c = DataLoader((x, y), batch_size=8, seed=8)
    assert epochs(a, 3) == epochs(c, 2)
    assert epochs(a, 0) != epochs(DataLoader((x, y), batch_size=8, seed=9), 0)


def test_no_shuffle_keeps_dataset_order() -> None:
    x, y = tensors(20)
    labels = [b[1].tolist() for b in DataLoader((x, y), batch_size=5, shuffle=False).epoch(3)]
    assert labels == [list(range(i, i + 5)) for i in range(0, 20, 5)]


def test_drop_last(caplog: pytest.LogCaptureFixture) -> None:
    x, y = tensors(50)
    with caplog.at_level(logging.WARNING, logger="flodl.data"):
        kept = DataLoader((x, y), batch_size=8)  # the default keeps every sample, as in torch
    assert not caplog.records
    assert not kept.drop_last
    assert kept.num_batches == 7 and [len(b[0]) for b in kept.epoch(0)][-1] == 2
    seen = torch.cat([b[1] for b in kept.epoch(0)])
    assert torch.equal(seen.sort().values, y)
    with caplog.at_level(logging.WARNING, logger="flodl.data"):
        dropped = DataLoader((x, y), batch_size=8, drop_last=True)
    assert "drop_last=True leaves out 2 of 50 samples every epoch" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flodl.data"):
        DataLoader((x, y), batch_size=8, drop_last=True, shuffle=False)
    assert "always the same (shuffle=False) last 2" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="flodl.data"):
        DataLoader((x, y), batch_size=10, drop_last=True)  # nothing left over: nothing to say
    assert not caplog.records
    assert dropped.drop_last and dropped.num_batches == 6
    assert all(len(b[0]) == 8 for b in dropped.epoch(0))
    assert torch.equal(torch.cat([b[1] for b in dropped.epoch(4)]), dropped.indices(4))


def test_iter_runs_successive_epochs() -> None:
    x, y = tensors()
    loader = DataLoader((x, y), batch_size=10)
    assert [list(loader), list(loader)] == epochs(loader, 0, 1)


def test_resident_cpu_tensors_are_not_copied() -> None:
    x, y = tensors()
    loader = DataLoader((x, y), batch_size=8)
    resident = loader._resident
    assert resident is not None and resident.tensors[0].data_ptr() == x.data_ptr()


@pytest.mark.parametrize("depth", [0, 1, 3])
@pytest.mark.parametrize(
    ("shuffle", "drop_last", "per_item"),
    [(True, True, False), (True, False, True), (False, False, False)],
)
def test_resident_and_streaming_give_identical_batches(
    depth: int, shuffle: bool, drop_last: bool, per_item: bool
) -> None:
    x, y = tensors(45)
    data: Any = Items(x, y) if per_item else (x, y)
    opts = dict(batch_size=8, seed=3, shuffle=shuffle, drop_last=drop_last, names=["x", "y"])
    resident = DataLoader(data, streaming=False, **opts)  # a map-style set must ask for it
    streamed = DataLoader(data, streaming=True, prefetch=depth, **opts)
    assert resident.is_resident and not streamed.is_resident
    assert streamed.prefetch_depth == depth
    assert epochs(resident, 0, 1, 5) == epochs(streamed, 0, 1, 5)


def test_per_item_dataset_goes_resident_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    from flodl_core.data import _resident

    monkeypatch.setattr(_resident, "LOAD_CHUNK_BYTES", 7 * 4 * 12)  # 7 samples per read
    x, y = tensors(30)
    loader = DataLoader(Items(x, y), batch_size=4, streaming=False)
    assert loader.is_resident
    data = loader._resident
    assert data is not None and torch.equal(data.tensors[0], x) and torch.equal(data.tensors[1], y)


def test_variable_shapes_stream_instead() -> None:
    loader = DataLoader(Ragged(), batch_size=4, shuffle=False)
    assert not loader.is_resident
    widths = [b[0].shape[1] for b in loader.epoch(0)]
    assert widths == [1, 1, 2, 2, 3]


def test_out_of_memory_while_going_resident_falls_back_to_streaming() -> None:
    x, y = tensors(40)
    loader = DataLoader(OomWhenWhole(x, y, limit=8), batch_size=8)
    assert not loader.is_resident
    assert epochs(loader, 0, 1) == epochs(DataLoader((x, y), batch_size=8), 0, 1)


def test_other_errors_while_going_resident_propagate() -> None:
    class Broken:
        def __len__(self) -> int:
            return 10

        def get_batch(self, indices: torch.Tensor) -> list[torch.Tensor]:
            if len(indices) > 1:
                raise KeyError("sample store is unreachable")
            return [indices.float()]

    with pytest.raises(KeyError, match="unreachable"):
        DataLoader(Broken(), batch_size=2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(batch_size=0), "batch_size must be an int > 0"),
        (dict(batch_size=-3), "batch_size must be an int > 0"),
        (dict(batch_size=True), "batch_size must be an int > 0"),
        (dict(batch_size=2.0), "batch_size must be an int > 0"),
        (dict(batch_size=4, seed=-1), "seed must be an int >= 0"),
        (dict(batch_size=4, prefetch=-1), "prefetch must be an int >= 0"),
        (dict(batch_size=4, vram_max_usage=0), r"vram_max_usage must be in \(0, 1\]"),
        (dict(batch_size=4, vram_max_usage=1.5), r"vram_max_usage must be in \(0, 1\]"),
        (dict(batch_size=4, names="xy"), "names must be a list of strings"),
        (dict(batch_size=4, names=["x"]), r"1 names \['x'\] given for a dataset of 2 fields"),
        (dict(batch_size=4, names=["x", "x"]), "given twice"),
        (
            dict(batch_size=51, drop_last=True),
            "50 samples with batch_size 51 and drop_last=True give no batch",
        ),
        (dict(batch_size=4, device="nope"), "unknown device 'nope'"),
    ],
)
def test_bad_options(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DataLoader(tensors(), **kwargs)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only error")
def test_cuda_target_without_cuda() -> None:
    with pytest.raises(ConfigError, match="device cuda requested but no CUDA device"):
        DataLoader(tensors(), batch_size=4, device="cuda")


def test_bad_datasets() -> None:
    with pytest.raises(DataError, match="is empty"):
        DataLoader([], batch_size=1)

    class NoFields:
        def __len__(self) -> int:
            return 3

        def get_batch(self, indices: torch.Tensor) -> list[torch.Tensor]:
            return []

    with pytest.raises(DataError, match="empty list; expected at least one tensor"):
        DataLoader(NoFields(), batch_size=1)
    with pytest.raises(ConfigError, match="cannot load from a object"):
        DataLoader(object(), batch_size=1)


def test_bad_epoch() -> None:
    loader = DataLoader(tensors(), batch_size=4)
    with pytest.raises(ConfigError, match="epoch must be an int >= 0"):
        loader.epoch(-1)


def test_small_last_batch_is_kept_for_evaluation() -> None:
    loader = DataLoader(tensors(3), batch_size=8, drop_last=False)
    assert [len(b[0]) for b in loader.epoch(0)] == [3]


def test_repr_and_properties() -> None:
    loader = DataLoader(tensors(), batch_size=8, names=["x", "y"])
    assert repr(loader) == (
        "DataLoader(resident on cpu, 50 samples, batch_size=8, 7 batches, names=['x', 'y'])"
    )
    assert loader.device == torch.device("cpu") and loader.seed == 42 and loader.shuffle
    assert loader.per_sample_bytes == 3 * 4 * 4 + 8 and loader.dataset_bytes == 50 * 56
    assert isinstance(loader.dataset, TensorDataSet) and not loader.is_sharded


def test_prefetch_depth_controls() -> None:
    loader = DataLoader(tensors(), batch_size=8, streaming=True)
    assert loader.prefetch_depth == 2  # CPU target: a small fixed depth
    loader.set_prefetch_depth(5)
    assert loader.prefetch_depth == 5
    assert loader.auto_resize() == 2
    with pytest.raises(ConfigError, match="prefetch depth must be an int >= 0"):
        loader.set_prefetch_depth(-1)


def test_shards_partition_each_epoch() -> None:
    x, y = tensors(50)
    loader = DataLoader((x, y), batch_size=4)
    shards = [loader.shard(r, 3) for r in range(3)]
    for epoch in (0, 1):
        seen = [torch.cat([b[1] for b in s.epoch(epoch)]) for s in shards]
        assert all(len(s) == 16 for s in seen)  # 50 // 3 = 16 each, 4 batches of 4
        assert len(set(torch.cat(seen).tolist())) == 48  # disjoint
        perm = loader.permutation(epoch)
        for r, s in enumerate(seen):
            assert torch.equal(s, perm[r * 16 : (r + 1) * 16])
    assert shards[1].is_sharded and shards[1].index_range == range(16, 32)
    assert shards[1]._resident is loader._resident  # shares the resident data


def test_explicit_ranges_and_streaming_shards_agree() -> None:
    x, y = tensors(50)
    resident = DataLoader((x, y), batch_size=5, drop_last=False).shard_range(30, 50)
    streamed = DataLoader((x, y), batch_size=5, drop_last=False, streaming=True)
    assert epochs(resident, 0, 2) == epochs(streamed.shard_range(30, 50), 0, 2)
    assert resident.num_samples == 20 and len(resident) == 4
    # A shard of a shard is relative to its parent.
    assert resident.shard(1, 2).index_range == range(40, 50)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda ld: ld.shard_range(10, 10), r"10\.\.10 is not within 0\.\.50"),
        (lambda ld: ld.shard_range(-1, 5), "not within"),
        (lambda ld: ld.shard_range(0, 51), "not within"),
        (lambda ld: ld.shard_range(0, 2.5), "stop must be an int"),
        (lambda ld: ld.shard(0, 60), "50 samples cannot be split among 60 ranks"),
        (lambda ld: ld.shard(2, 2), "rank 2 is out of range"),
        (lambda ld: ld.shard(0, 20), "2 samples with batch_size 4 and drop_last=True"),
    ],
)
def test_bad_shards(call: Any, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        call(DataLoader(tensors(50), batch_size=4, drop_last=True))


@pytest.mark.gpu
def test_cuda_resident_and_streaming_match_cpu() -> None:
    x, y = tensors(200)
    cpu = DataLoader((x, y), batch_size=16, drop_last=False)
    resident = DataLoader((x, y), batch_size=16, drop_last=False, device="cuda")
    streamed = DataLoader((x, y), batch_size=16, drop_last=False, device="cuda", streaming=True)
    assert resident.is_resident and not streamed.is_resident and streamed.prefetch_depth >= 1
    for epoch in (0, 3):
        for a, b, c in zip(
            cpu.epoch(epoch), resident.epoch(epoch), streamed.epoch(epoch), strict=True
        ):
            assert b[0].device.type == "cuda" and c[0].device.type == "cuda"
            assert a == b.to("cpu") and a == c.to("cpu")


@pytest.mark.gpu
def test_cuda_budget_too_small_streams() -> None:
    # A budget below what the CUDA context already uses leaves no room: stream.
    loader = DataLoader(tensors(100), batch_size=10, device="cuda", vram_max_usage=1e-6)
    assert not loader.is_resident
    total = torch.cat([b[1] for b in loader.epoch(0)])
    assert total.device.type == "cuda" and torch.equal(total.cpu().sort().values, torch.arange(100))


@pytest.mark.gpu
@pytest.mark.parametrize("workers", [0, 3])
def test_cuda_streamed_batches_are_safe_to_compute_on(workers: int) -> None:
    x, y = tensors(512)
    opts = dict(device="cuda", streaming=True, prefetch=4, num_workers=workers)
    loader = DataLoader(Items(x, y), batch_size=32, **opts)
    sums = [float(b[0].sum()) for b in loader.epoch(0)]
    ref = [float(b[0].sum()) for b in DataLoader(Items(x, y), batch_size=32).epoch(0)]
    assert sums == pytest.approx(ref, rel=1e-5, abs=1e-4)


def test_a_list_of_two_tensors_says_a_tuple_means_fields() -> None:
    x, y = tensors(50)
    with pytest.raises(
        DataError,
        match=r"shape \(50,\) but sample 0's has shape \(50, 3, 4\)"
        r".*pass a tuple \(x, y\) or a dict",
    ):
        DataLoader([x, y], batch_size=4)


@pytest.mark.parametrize("depth", [0, 2])
def test_dict_dataset_on_every_path(depth: int) -> None:
    x, y = tensors(45)
    fields = {"x": x, "y": y}
    opts = dict(batch_size=8, seed=3)
    resident = DataLoader(fields, **opts)
    streamed = DataLoader(fields, streaming=True, prefetch=depth, **opts)
    as_tuple = DataLoader((x, y), names=["x", "y"], **opts)
    assert resident.is_resident and not streamed.is_resident
    assert resident.names == streamed.names == ("x", "y")
    assert epochs(resident, 0, 1, 5) == epochs(streamed, 0, 1, 5) == epochs(as_tuple, 0, 1, 5)
    batch = next(iter(resident.epoch(1)))
    assert batch["x"] is batch[0] and batch["y"] is batch[1]
    # epoch ordering: the seeded permutation, as for a tuple
    assert torch.equal(torch.cat([b["y"] for b in resident.epoch(1)]), resident.permutation(1))
    # shard_range, resident and streamed alike
    for loader in (resident, streamed):
        part = loader.shard_range(10, 30)
        assert torch.equal(torch.cat([b["y"] for b in part.epoch(2)]), loader.permutation(2)[10:30])
    # the builder, and explicit names over the keys
    built = DataLoader.from_batch_dataset(fields).batch_size(8).seed(3).build()
    assert epochs(built, 0) == epochs(resident, 0)
    renamed = DataLoader(fields, names=["a", "b"], **opts)
    assert renamed.names == ("a", "b")


def test_dict_dataset_errors_reach_the_loader() -> None:
    x, y = tensors(50)
    with pytest.raises(ShapeError, match=r"field 'y' has 49 samples"):
        DataLoader({"x": x, "y": y[:49]}, batch_size=4)
    with pytest.raises(DataError, match=r"field 'y' is a list"):
        DataLoader({"x": x, "y": y.tolist()}, batch_size=4)


class Augmented(Dataset):
    """A map-style set whose ``__getitem__`` draws a random transform, as torchvision's do."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3,), float(i)) + torch.randn(3), i


def test_map_style_datasets_stream_so_random_transforms_stay_random() -> None:
    # Held resident, the first epoch's draws would come back in every epoch.
    loader = DataLoader(Augmented(), batch_size=16, shuffle=False)
    assert not loader.is_resident
    first, second = (next(iter(loader.epoch(k)))[0] for k in (0, 1))
    assert not torch.equal(first, second)
    assert torch.allclose(first.mean(1), torch.arange(16.0), atol=3.0)
    frozen = DataLoader(Augmented(), batch_size=16, shuffle=False, streaming=False)
    assert frozen.is_resident  # asked for: the samples are read once
    assert torch.equal(*(next(iter(frozen.epoch(k)))[0] for k in (0, 1)))


def pad_collate(samples: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """Variable-length token rows padded with 0 to the batch's longest, with their lengths."""
    seqs = [s for s, _ in samples]
    return {
        "tokens": torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True),
        "length": torch.tensor([len(s) for s in seqs]),
        "label": torch.tensor([y for _, y in samples]),
    }


class Sentences(Dataset):
    def __len__(self) -> int:
        return 23

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.arange(1, 2 + i % 7), i % 2


@pytest.mark.parametrize("shuffle", [False, True])
def test_collate_fn_batches_match_torchs_loader(shuffle: bool) -> None:
    ours = DataLoader(Sentences(), batch_size=5, collate_fn=pad_collate, shuffle=shuffle, seed=4)
    assert not ours.is_resident and ours.names == ("tokens", "length", "label")
    order = ours.indices(2).tolist()
    theirs = TorchLoader(Subset(Sentences(), order), batch_size=5, collate_fn=pad_collate)
    got = list(ours.epoch(2))
    assert len(got) == len(ours) == 5
    for batch, want in zip(got, theirs, strict=True):
        for name in ours.names:
            assert torch.equal(batch[name], want[name])
    assert [b["tokens"].shape[1] for b in got] == [int(b["length"].max()) for b in got]


def test_collate_fn_over_tensors_and_a_tuple_result() -> None:
    x, y = tensors(20)

    def flip_pairs(samples: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, ...]:
        return torch.stack([s[0].flip(0) for s in samples]), torch.stack([s[1] for s in samples])

    loader = DataLoader((x, y), batch_size=4, shuffle=False, collate_fn=flip_pairs)
    first = next(iter(loader.epoch(0)))
    assert torch.equal(first[0], x[:4].flip(1)) and torch.equal(first[1], y[:4])


class Indexed:
    def __len__(self) -> int:
        return 8

    def get_batch(self, indices: torch.Tensor) -> list[torch.Tensor]:
        return [indices.float()]


@pytest.mark.parametrize(
    ("data", "options", "match"),
    [
        (Sentences(), {"streaming": False}, "leave streaming unset with a collate_fn"),
        (Indexed(), {}, "Indexed has get_batch but no __getitem__"),
        (ItemDataSet(Sentences(), pad_collate), {}, "collate_fn given twice"),
        (Sentences(), {"collate_fn": "pad"}, "collate_fn must be a function.*got str"),
    ],
)
def test_collate_fn_misuse_is_named(data: Any, options: dict[str, Any], match: str) -> None:
    options = {"collate_fn": pad_collate, **options}
    with pytest.raises(ConfigError, match=match):
        DataLoader(data, batch_size=4, **options)


@pytest.mark.parametrize(
    ("collate", "error", "match"),
    [
        (lambda s: [[len(x) for x, _ in s]], DataError, "returned a list holding list"),
        (lambda s: {"n": len(s)}, DataError, "returned a dict holding int"),
        (lambda s: torch.zeros(3, 3), ShapeError, r"0 has shape \(3, 3\) for a batch of 2 "),
        (lambda s: torch.tensor(1.0), ShapeError, r"shape \(\) for a batch of 2"),
    ],
)
def test_a_bad_collate_result_is_named(collate: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        DataLoader(Sentences(), batch_size=4, collate_fn=collate)


def test_collate_keys_that_change_are_named() -> None:
    def keyed(samples: list[Any]) -> dict[str, torch.Tensor]:
        key = "a" if samples[0][1] == 0 else "b"
        return {key: torch.zeros(len(samples))}

    loader = DataLoader(Sentences(), batch_size=1, shuffle=False, collate_fn=keyed, prefetch=0)
    with pytest.raises(DataError, match=r"keys \['b'\] for the batch of sample 1.*had \['a'\]"):
        list(loader.epoch(0))
