from __future__ import annotations

import pytest
import torch

from flodl_core import ConfigError, DataLoader


def test_builder_sets_every_option() -> None:
    x, y = torch.randn(30, 2), torch.arange(30)
    loader = (
        DataLoader.from_batch_dataset((x, y))
        .batch_size(4)
        .device("cpu")
        .seed(3)
        .shuffle(False)
        .drop_last(False)
        .names(["x", "y"])
        .prefetch(1)
        .streaming()
        .vram_max_usage(0.5)
        .build()
    )
    assert not loader.is_resident and loader.prefetch_depth == 1
    assert loader.seed == 3 and not loader.shuffle and not loader.drop_last
    assert loader.names == ("x", "y") and loader.num_batches == 8
    direct = DataLoader(
        (x, y), batch_size=4, seed=3, shuffle=False, drop_last=False, names=["x", "y"]
    )
    assert list(loader.epoch(0)) == list(direct.epoch(0))


def test_builder_defaults_match_the_constructor() -> None:
    data = (torch.randn(20, 2),)
    built = DataLoader.from_batch_dataset(data).batch_size(3).build()
    direct = DataLoader(data, batch_size=3)
    assert built.is_resident and not built.drop_last and built.shuffle and built.seed == 42
    assert list(built.epoch(1)) == list(direct.epoch(1))


def test_builder_collate_fn_and_resident_map_style_data() -> None:
    samples = [(torch.arange(1 + i % 3), i) for i in range(12)]

    def pad(batch: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        seqs = torch.nn.utils.rnn.pad_sequence([s for s, _ in batch], batch_first=True)
        return seqs, torch.tensor([i for _, i in batch])

    builder = DataLoader.from_batch_dataset(samples).batch_size(4).collate_fn(pad).num_workers(2)
    built = builder.build()
    direct = DataLoader(samples, batch_size=4, collate_fn=pad)
    assert not built.is_resident and list(built.epoch(2)) == list(direct.epoch(2))
    fixed = [(torch.full((2,), float(i)), i) for i in range(12)]
    assert DataLoader.from_batch_dataset(fixed).batch_size(4).streaming(False).build().is_resident
    assert not DataLoader.from_batch_dataset(fixed).batch_size(4).build().is_resident


def test_builder_requires_batch_size() -> None:
    with pytest.raises(ConfigError, match=r"batch_size is required: call \.batch_size\(n\)"):
        DataLoader.from_batch_dataset((torch.zeros(4),)).build()
    with pytest.raises(ConfigError, match="batch_size must be an int > 0"):
        DataLoader.from_batch_dataset((torch.zeros(4),)).batch_size(0).build()
