from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch

from flodl_core import ConfigError, DataError, DataLoader, ShapeError
from flodl_core.data.datasets import Shakespeare

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n"


def test_windows_vocab_and_shifted_targets() -> None:
    ds = Shakespeare.parse(TEXT, seq_len=8)
    assert ds.idx_to_char == "".join(sorted(set(TEXT))) and ds.vocab_size == len(set(TEXT))
    n = (len(TEXT) - 1) // 8
    assert len(ds) == n and ds.data.shape == (n, 8) == ds.targets.shape and ds.seq_len == 8
    assert ds.data.dtype == torch.int64
    for i in range(n):
        assert ds.decode(ds.data[i]) == TEXT[i * 8 : i * 8 + 8]  # non-overlapping
        assert ds.decode(ds.targets[i]) == TEXT[i * 8 + 1 : i * 8 + 9]  # shifted by one
    assert ds.char_to_idx["F"] == ds.idx_to_char.index("F")
    assert torch.equal(
        ds.encode("hear"), ds.data[0].new_tensor([ds.char_to_idx[c] for c in "hear"])
    )


def test_bytes_and_exact_minimum_length() -> None:
    ds = Shakespeare.parse(b"abcab", seq_len=4)
    assert len(ds) == 1 and ds.decode(ds.data[0]) == "abca" and ds.decode(ds.targets[0]) == "bcab"
    text = "héllo wörld"
    utf8 = Shakespeare.parse(text.encode("utf-8"), 3)
    assert utf8.vocab_size == len(set(text)) and utf8.decode(utf8.data[0]) == "hél"


def test_too_short_text() -> None:
    with pytest.raises(DataError, match="text has 4 characters; seq_len 4 needs at least 5"):
        Shakespeare.parse("abcd", seq_len=4)


def test_bad_inputs() -> None:
    with pytest.raises(ConfigError, match="seq_len must be an int >= 1"):
        Shakespeare.parse(TEXT, 0)
    with pytest.raises(DataError, match="not valid UTF-8"):
        Shakespeare.parse(b"\xff\xfe\xfd" * 10, 2)
    with pytest.raises(DataError, match="character 'Z' is not in the vocabulary"):
        Shakespeare.parse(TEXT, 8).encode("Z")


def test_split_shares_the_vocabulary() -> None:
    ds = Shakespeare.parse(TEXT * 4, seq_len=5)
    train, test = ds.split(0.9)
    assert len(train) == int(len(ds) * 0.9) and len(train) + len(test) == len(ds)
    assert train.idx_to_char == test.idx_to_char == ds.idx_to_char
    assert torch.equal(test.data[0], ds.data[len(train)])
    for bad in (1.0, float("nan"), "0.9"):
        with pytest.raises(ConfigError, match=r"train_fraction must be in \(0, 1\)"):
            ds.split(bad)  # type: ignore[arg-type]
    with pytest.raises(DataError, match="cannot be split"):
        Shakespeare.parse("abcdef", 2).split(0.1)


def test_feeds_a_loader() -> None:
    ds = Shakespeare.parse(TEXT * 10, seq_len=16)
    loader = DataLoader(ds, batch_size=4, names=["input", "target"])
    batch = next(iter(loader))
    assert batch["input"].shape == (4, 16) == batch["target"].shape


def test_constructor_checks_shapes() -> None:
    with pytest.raises(ShapeError, match=r"must both be \(N, L\), got \(2, 4\) and \(2, 3\)"):
        Shakespeare(
            torch.zeros(2, 4, dtype=torch.int64), torch.zeros(2, 3, dtype=torch.int64), "ab"
        )


def test_fields_named_and_paths_accepted(tmp_path: Path) -> None:
    ds = Shakespeare.parse(TEXT * 10, seq_len=16)
    assert repr(ds).startswith(f"Shakespeare({len(ds)} samples; input: (16,) int64, target: (16,)")
    x, y = ds[0]
    assert torch.equal(x[1:], y[:-1])
    batch = next(iter(DataLoader(ds, batch_size=4)))
    assert batch.names == ("input", "target")
    plain, packed = tmp_path / "t.txt", tmp_path / "t.txt.gz"
    plain.write_text(TEXT * 10, encoding="utf-8")
    packed.write_bytes(gzip.compress((TEXT * 10).encode()))
    for source in (plain, packed):
        assert torch.equal(Shakespeare.parse(source, seq_len=16).data, ds.data)
    with pytest.raises(DataError, match=r"text must be a str, bytes or a pathlib\.Path, got int"):
        Shakespeare.parse(5, seq_len=4)  # type: ignore[arg-type]


def test_decode_refuses_ids_outside_the_vocabulary() -> None:
    ds = Shakespeare.parse("hello world", seq_len=3)
    # -1 would wrap to the last character, 99 would be an IndexError about a string.
    for bad in ([-1], [99], torch.tensor([0, -2]), [1.0]):
        with pytest.raises(DataError, match=r"is not a character id in 0\.\.7"):
            ds.decode(bad)
    with pytest.raises(ShapeError, match=r"ids must be 1-D \(L,\), got shape \(2, 3\)"):
        ds.decode(ds.data[:2])
    assert ds.decode([0, 1]) == ds.idx_to_char[:2]
