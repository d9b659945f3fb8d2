from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset, default_collate

from flodl_core import ConfigError, DataError, DataLoader, ShapeError
from flodl_core.data import (
    BatchDataSet,
    DataSet,
    ItemDataSet,
    TensorDataSet,
    as_batch_dataset,
)
from flodl_core.data._dataset import check_fields


class Samples(Dataset):
    """A torch map-style dataset whose samples mix every supported field kind."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[Any, ...]:
        g = torch.Generator().manual_seed(i)
        return (
            torch.randn(3, 2, generator=g),
            i % 4,
            i / 7,
            np.full((2,), i, dtype=np.int32),
            i % 2 == 0,
        )


def test_item_dataset_matches_default_collate() -> None:
    ds = Samples(10)
    idx = torch.tensor([4, 0, 9, 2])
    ours = ItemDataSet(ds).get_batch(idx)
    ref = default_collate([ds[i] for i in idx.tolist()])
    assert len(ours) == len(ref)
    for a, b in zip(ours, ref, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)


def test_single_tensor_samples() -> None:
    data = [torch.full((2,), float(i)) for i in range(5)]
    (out,) = ItemDataSet(data).get_batch(torch.tensor([3, 1]))
    assert torch.equal(out, torch.tensor([[3.0, 3.0], [1.0, 1.0]]))


@pytest.mark.parametrize(
    ("samples", "match"),
    [
        ([(torch.zeros(1), 1), (torch.zeros(1),)], "sample 1 has 1 fields but sample 0 has 2"),
        ([("a",), ("b",)], "field 0 is a str"),
        ([(torch.zeros(2),), (torch.zeros(3),)], "do not stack"),
        ([(), ()], "empty tuple"),
    ],
)
def test_item_dataset_errors(samples: list[Any], match: str) -> None:
    with pytest.raises(DataError, match=match):
        ItemDataSet(samples).get_batch(torch.tensor([0, 1]))


class DictSamples(Dataset):
    """A torch map-style dataset of dict samples, the way many PyTorch datasets return them."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        g = torch.Generator().manual_seed(i)
        return {"image": torch.randn(3, 2, generator=g), "label": i % 4, "weight": i / 7}


def test_dict_samples_stack_by_key_and_name_the_fields() -> None:
    ds = DictSamples(10)
    idx = torch.tensor([4, 0, 9, 2])
    items = ItemDataSet(ds)
    assert items.field_names is None  # known once a sample was read
    ours = items.get_batch(idx)
    ref = default_collate([ds[i] for i in idx.tolist()])
    assert items.field_names == ("image", "label", "weight")
    for got, key in zip(ours, items.field_names, strict=True):
        assert got.dtype == ref[key].dtype and torch.equal(got, ref[key])


def test_a_loader_over_dict_samples_gives_batches_by_name() -> None:
    from flodl_core import DataLoader

    batch = next(iter(DataLoader(DictSamples(8), batch_size=4, shuffle=False).epoch(0)))
    assert batch["image"].shape == (4, 3, 2) and batch["label"].tolist() == [0, 1, 2, 3]
    assert torch.equal(batch[0], batch["image"])


@pytest.mark.parametrize(
    ("samples", "match"),
    [
        ([{"x": torch.zeros(1), "y": 1}, {"x": torch.zeros(1)}], r"sample 1: keys \['x'\], where "
         r"the first sample had keys \['x', 'y'\]"),
        ([{"x": torch.zeros(1)}, (torch.zeros(1),)], r"sample 1: tuple, where the first sample"),
        ([{"text": "a"}, {"text": "b"}], r"sample field 'text' is a str"),
    ],
)  # fmt: skip
def test_dict_samples_that_differ_are_named(samples: list[Any], match: str) -> None:
    with pytest.raises(DataError, match=match):
        ItemDataSet(samples).get_batch(torch.tensor([0, 1]))


def test_tensor_dataset_gathers_rows() -> None:
    x, y = torch.randn(6, 3), torch.arange(6)
    ds = TensorDataSet(x, y)
    idx = torch.tensor([5, 0, 2])
    bx, by = ds.get_batch(idx)
    assert len(ds) == 6 and torch.equal(bx, x[idx]) and torch.equal(by, y[idx])


def test_tensor_dataset_errors() -> None:
    with pytest.raises(DataError, match="at least one tensor"):
        TensorDataSet()
    with pytest.raises(ShapeError, match="field 1 has 4 samples on dim 0 but field 0 has 3"):
        TensorDataSet(torch.zeros(3, 2), torch.zeros(4))
    with pytest.raises(ShapeError, match="0-d"):
        TensorDataSet(torch.tensor(1.0))
    with pytest.raises(DataError, match="field 0 is a list"):
        TensorDataSet([1, 2])  # type: ignore[arg-type]


def test_protocols_are_structural() -> None:
    assert isinstance(TensorDataSet(torch.zeros(2)), BatchDataSet)
    assert isinstance(Samples(2), DataSet) and not isinstance(Samples(2), BatchDataSet)


def test_as_batch_dataset_accepts_every_kind() -> None:
    x, y = torch.randn(4, 2), torch.arange(4)
    native = TensorDataSet(x)
    assert as_batch_dataset(native) is native
    from_tuple = as_batch_dataset((x, y))
    assert isinstance(from_tuple, TensorDataSet) and from_tuple.tensors[1] is y
    assert isinstance(as_batch_dataset(x), TensorDataSet)
    # torch's TensorDataset: its own tensors, no copy.
    wrapped = as_batch_dataset(TensorDataset(x, y))
    assert isinstance(wrapped, TensorDataSet) and wrapped.tensors[0].data_ptr() == x.data_ptr()
    # A list is a dataset of samples, not a tuple of fields.
    assert isinstance(as_batch_dataset([x[0], x[1]]), ItemDataSet)
    assert isinstance(as_batch_dataset(Samples(3)), ItemDataSet)


def test_as_batch_dataset_rejects_others() -> None:
    with pytest.raises(ConfigError, match="cannot load from a int"):
        as_batch_dataset(3)


def test_check_fields_errors() -> None:
    idx = torch.tensor([0, 1])
    with pytest.raises(DataError, match="returned a Tensor"):
        check_fields(torch.zeros(2), idx, None)
    with pytest.raises(DataError, match="empty list"):
        check_fields([], idx, None)
    with pytest.raises(DataError, match="returned 1 tensors; earlier batches had 2"):
        check_fields([torch.zeros(2)], idx, 2)
    with pytest.raises(DataError, match="field 1 is a int"):
        check_fields([torch.zeros(2), 3], idx, None)
    with pytest.raises(ShapeError, match=r"shape \(3,\) for 2 indices; expected \(2, ...\)"):
        check_fields([torch.zeros(3)], idx, None)


@pytest.mark.parametrize(
    "indices",
    [
        [3, 0, 4],
        (3, 0, 4),
        range(3, 5),
        np.array([3, 0, 4]),
        np.array([3, 0], dtype=np.int32),
        torch.tensor([3, 0, 4]),
        torch.tensor([3, 0], dtype=torch.int32),
    ],
)
def test_get_batch_accepts_lists_arrays_and_int_tensors(indices: object) -> None:
    x = torch.arange(10.0).reshape(5, 2)
    ds = TensorDataSet(x, torch.arange(5))
    want = list(indices.tolist() if hasattr(indices, "tolist") else indices)  # type: ignore[union-attr]
    xs, ys = ds.get_batch(indices)  # type: ignore[arg-type]
    assert ys.tolist() == want and torch.equal(xs, x[want])


@pytest.mark.parametrize(
    ("indices", "match"),
    [
        (torch.tensor([[0, 1]]), r"indices must be 1-D .* got shape \(1, 2\); flatten"),
        (torch.tensor(1), r"must be 1-D .* got shape \(\)"),
        (torch.tensor([0.0, 1.0]), r"integer tensor, got dtype torch.float32; convert with .long"),
        (torch.tensor([True, False]), r"integer tensor, got dtype torch.bool"),
        ([0, 1.5], r"indices must be ints, got float 1.5"),
        ([0, True], r"indices must be ints, got bool True"),
        (np.array([0.0]), r"a numpy array of float64"),
        ([0, 5], r"index 5 is out of range for 5 samples; positions go from 0 to 4"),
        ([-1], r"index -1 is out of range .* \(negative positions are not accepted\)"),
        ("0,1", r"got str"),
    ],
)
def test_get_batch_rejects_bad_indices(indices: object, match: str) -> None:
    ds = TensorDataSet(torch.zeros(5, 2))
    with pytest.raises(DataError, match=match):
        ds.get_batch(indices)  # type: ignore[arg-type]


def test_tensor_dataset_item_access_and_repr() -> None:
    ds = TensorDataSet(torch.zeros(4, 2), torch.arange(4))
    assert repr(ds) == "TensorDataSet(4 samples; 0: (2,) float32, 1: () int64)"
    x, y = ds[2]
    assert x.shape == (2,) and int(y) == 2
    with pytest.raises(TypeError, match=r"takes an int position, got slice; use get_batch"):
        ds[0:2]  # type: ignore[index]


def test_a_list_of_field_tensors_is_told_to_use_a_tuple_or_dict() -> None:
    x, y = torch.zeros(100, 3), torch.zeros(100)
    with pytest.raises(DataError) as info:
        ItemDataSet([x, y]).get_batch(torch.tensor([0, 1]))
    text = str(info.value)
    assert "field 0 of sample 1 has shape (100,) but sample 0's has shape (100, 3)" in text
    assert "a list is read as a dataset of samples" in text
    assert "pass a tuple (x, y) or a dict {'x': x, 'y': y}" in text


def test_stack_errors_of_other_datasets_name_the_shapes_without_the_list_hint() -> None:
    class Odd(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return torch.zeros(2 + (i == 2)), i

    with pytest.raises(DataError) as info:
        ItemDataSet(Odd()).get_batch(torch.tensor([1, 2, 3]))
    text = str(info.value)
    assert "field 0 of sample 2 has shape (3,) but sample 1's has shape (2,)" in text
    assert "list" not in text


def test_dict_of_tensors_is_named_fields_in_insertion_order() -> None:
    x, y = torch.randn(6, 3), torch.arange(6)
    ds = as_batch_dataset({"y": y, "x": x})
    assert isinstance(ds, TensorDataSet) and ds.field_names == ("y", "x")
    assert ds.tensors[0] is y and ds.tensors[1] is x  # no copy
    by, bx = ds.get_batch([4, 1])
    assert by.tolist() == [4, 1] and torch.equal(bx, x[[4, 1]])
    assert repr(ds) == "TensorDataSet(6 samples; y: () int64, x: (3,) float32)"
    assert TensorDataSet(x, y, names=["a", "b"]).field_names == ("a", "b")
    assert TensorDataSet(x, y).field_names is None


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({}, DataError, r"needs at least one entry"),
        (
            {"x": torch.zeros(4, 2), "y": torch.zeros(3)},
            ShapeError,
            r"field 'y' has 3 samples .*"
            r"\(shape \(3,\)\) but field 'x' has 4 \(shape \(4, 2\)\)",
        ),
        ({"x": torch.zeros(4), "y": [0, 1, 2, 3]}, DataError, r"field 'y' is a list; .* Tensor"),
        (
            {"x": torch.zeros(4), "y": np.array(["a", "b", "c", "d"])},
            DataError,
            r"field 'y' is a numpy array of <U1, which has no tensor dtype",
        ),
        ({"x": torch.tensor(1.0)}, ShapeError, r"field 'x' is a 0-d tensor"),
        ({0: torch.zeros(4)}, DataError, r"dict key 0 is not a field name"),
        ({"": torch.zeros(4)}, DataError, r"dict key '' is not a field name"),
    ],
)
def test_dict_of_fields_errors(fields: dict[Any, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        as_batch_dataset(fields)


def test_tensor_dataset_names_must_match_the_fields() -> None:
    with pytest.raises(DataError, match="must be a list of 2 strings"):
        TensorDataSet(torch.zeros(2), torch.zeros(2), names=["x"])
    with pytest.raises(DataError, match="must be a list of 1 strings"):
        TensorDataSet(torch.zeros(2), names="x")
    with pytest.raises(DataError, match="field name 3 is not a non-empty string"):
        TensorDataSet(torch.zeros(2), names=[3])  # type: ignore[list-item]


def test_numpy_arrays_are_fields_that_share_their_memory() -> None:
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    y = np.arange(8)
    frozen = np.arange(8.0)
    frozen.flags.writeable = False  # np.load(..., mmap_mode="r") gives such arrays
    reversed_rows = x[::-1]  # negative strides: copied, as torch takes none
    cases: list[tuple[Any, np.ndarray]] = [
        ((x, y), x),
        ({"x": x, "y": y}, x),
        (x, x),
        ((frozen,), frozen),
        ((reversed_rows,), reversed_rows),
    ]
    for data, first_field in cases:
        loader = DataLoader(data, batch_size=4, shuffle=False)
        assert loader.is_resident
        first = next(iter(loader.epoch(0)))[0]
        assert torch.equal(first, torch.tensor(first_field[:4].copy()))
    ds = TensorDataSet(x, y)
    x[0, 0] = 100.0  # shared, not copied
    assert ds.tensors[0][0, 0] == 100.0 and ds.tensors[1].dtype == torch.int64


def test_random_split_parts_of_tensors_are_tensor_fields() -> None:
    x, y = torch.randn(50, 3), torch.arange(50)
    train, val = torch.utils.data.random_split(
        TensorDataset(x, y), [40, 10], generator=torch.Generator().manual_seed(0)
    )
    nested = torch.utils.data.Subset(val, [9, 0])
    for part in (train, val, nested):
        loader = DataLoader(part, batch_size=4, shuffle=False)
        assert loader.is_resident and loader.num_samples == len(part)
        got = torch.cat([b[1] for b in loader.epoch(0)])
        assert got.tolist() == [int(part[i][1]) for i in range(len(part))]
    named = torch.utils.data.Subset(TensorDataSet(x, y, names=["x", "y"]), [3, 1])
    assert DataLoader(named, batch_size=2).names == ("x", "y")
