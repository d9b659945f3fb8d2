from __future__ import annotations

import pytest
import torch

from flodl_core import ConfigError, PathError
from flodl_core.data import Batch


def make() -> Batch:
    return Batch([torch.arange(6.0).reshape(3, 2), torch.tensor([0, 1, 2])], ["image", "label"])


def test_positional_and_named_access() -> None:
    b = make()
    assert b[0] is b["image"] and b[1] is b["label"] and b[-1] is b["label"]
    x, y = b
    assert x is b[0] and y is b[1]
    assert len(b) == 2 and b.names == ("image", "label") and b.tensors == (x, y)


def test_default_names_are_positions() -> None:
    b = Batch([torch.zeros(2), torch.ones(2)])
    assert b.names == ("0", "1") and b["1"] is b[1]


def test_membership_get_and_dict() -> None:
    b = make()
    assert "image" in b and b.has("label") and "mask" not in b and not b.has("mask")
    assert 0 not in b  # membership is by name only
    assert b.get("mask") is None and b.get("label") is b[1]
    assert list(b.as_dict()) == ["image", "label"]


def test_unknown_name_lists_valid_ones() -> None:
    with pytest.raises(PathError, match=r"'imgae'.*valid names here: image, label"):
        make()["imgae"]


def test_bad_position_and_key_type() -> None:
    with pytest.raises(IndexError, match="position 2 is out of range for 2"):
        make()[2]
    with pytest.raises(TypeError, match="int positions or str names"):
        make()[1.0]  # type: ignore[index]
    with pytest.raises(TypeError):
        make()[True]  # type: ignore[index]


@pytest.mark.parametrize(
    ("names", "match"),
    [(["a"], "2 tensors but 1 names"), (["a", "a"], "given twice"), (["a", ""], "non-empty")],
)
def test_bad_names(names: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Batch([torch.zeros(1), torch.zeros(1)], names)


def test_to_equality_and_repr() -> None:
    b = make()
    moved = b.to("cpu")
    assert moved == b and moved.names == b.names
    other = Batch([b[0] + 1, b[1]], b.names)
    assert other != b
    assert repr(b) == "Batch(image=(3, 2) float32, label=(3,) int64)"


def test_split_cuts_every_tensor_into_consecutive_named_parts() -> None:
    b = Batch([torch.arange(14.0).reshape(7, 2), torch.arange(7)], ["image", "label"])
    parts = b.split(3)  # 7 samples: 3, 2, 2 (torch.tensor_split)
    assert [len(p["label"]) for p in parts] == [3, 2, 2]
    assert all(p.names == ("image", "label") for p in parts)
    assert torch.equal(torch.cat([p["image"] for p in parts]), b["image"])
    assert torch.equal(torch.cat([p[1] for p in parts]), b[1])
    assert parts[1]["image"].data_ptr() == b["image"][3].data_ptr()  # views, not copies
    assert b.split(1) == [b]


@pytest.mark.parametrize(("parts", "match"), [(4, "batch of 3 samples into 4 parts"), (0, "parts")])
def test_split_refuses_more_parts_than_samples(parts: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make().split(parts)
