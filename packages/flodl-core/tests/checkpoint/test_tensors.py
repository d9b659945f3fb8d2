"""Tensor <-> bytes: every tagged dtype bit-exact, lossless widening, refusals."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from flodl_core import CheckpointError
from flodl_core.checkpoint import _tensors
from flodl_core.checkpoint._format import DType
from flodl_core.checkpoint._tensors import (
    check_storable,
    storage_dtype,
    tensor_from_bytes,
    tensor_to_bytes,
)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int32, torch.int64]


def sample(dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    if dtype.is_floating_point:
        t = torch.randn(shape, generator=g, dtype=torch.float64) * 1e3
        t = t.to(dtype)
        if t.numel() >= 3:  # special values must survive bit for bit
            flat = t.view(-1)
            flat[0], flat[1], flat[2] = float("inf"), float("nan"), -0.0
        return t
    info = torch.iinfo(dtype)
    t = torch.randint(-1000, 1000, shape, generator=g, dtype=dtype)
    if t.numel() >= 2:
        t.view(-1)[0], t.view(-1)[1] = info.min, info.max
    return t


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (5,), (2, 3, 4)], ids=str)
def test_round_trip_is_bit_exact(
    dtype: torch.dtype, shape: tuple[int, ...], to_bytes: Callable[[torch.Tensor], bytes]
) -> None:
    t = sample(dtype, shape)
    got_shape, tag, data = tensor_to_bytes(t, "x")
    assert got_shape == shape and tag is _tensors.TORCH_TO_TAG[dtype]
    assert bytes(data) == to_bytes(t)
    back = tensor_from_bytes(bytearray(data), got_shape, tag)
    assert back.dtype is dtype and tuple(back.shape) == shape
    assert to_bytes(back) == to_bytes(t)


def test_non_contiguous_is_written_in_c_order(to_bytes: Callable[[torch.Tensor], bytes]) -> None:
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    assert not t.is_contiguous()
    shape, _, data = tensor_to_bytes(t, "x")
    assert shape == (4, 3) and bytes(data) == to_bytes(t.contiguous())


@pytest.mark.parametrize(
    ("dtype", "stored"),
    [
        (torch.bool, torch.int32),
        (torch.uint8, torch.int32),
        (torch.int8, torch.int32),
        (torch.int16, torch.int32),
        (torch.uint16, torch.int32),
        (torch.uint32, torch.int64),
    ],
    ids=str,
)
def test_narrow_integers_widen_losslessly(dtype: torch.dtype, stored: torch.dtype) -> None:
    t = torch.tensor([0, 1, 1], dtype=dtype)
    if dtype is not torch.bool:
        info = torch.iinfo(dtype)
        t = torch.tensor([info.min, 1, info.max], dtype=dtype)
    shape, tag, data = tensor_to_bytes(t, "x")
    assert storage_dtype(dtype, "x") is stored
    back = tensor_from_bytes(bytearray(data), shape, tag)
    assert back.dtype is stored
    assert torch.equal(back.to(dtype), t)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.uint64, torch.float8_e4m3fn], ids=str)
def test_unstorable_dtypes_are_refused_by_name(dtype: torch.dtype) -> None:
    with pytest.raises(CheckpointError, match=rf"'layer.w' has dtype {dtype}.*supported: float16"):
        tensor_to_bytes(torch.zeros(2, dtype=dtype), "layer.w")


def test_from_bytes_shares_the_buffer() -> None:
    buf = bytearray(8)
    t = tensor_from_bytes(buf, (2,), DType.F32)
    buf[0:4] = b"\x00\x00\x80\x3f"
    assert t[0].item() == 1.0


def test_big_endian_hosts_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_tensors, "_LITTLE", False)
    with pytest.raises(CheckpointError, match="little-endian"):
        tensor_to_bytes(torch.zeros(1), "x")
    with pytest.raises(CheckpointError, match="little-endian"):
        tensor_from_bytes(bytearray(4), (1,), DType.F32)


def test_sparse_and_meta_tensors_are_refused() -> None:
    with pytest.raises(CheckpointError, match=r"'s' is a torch\.sparse_coo tensor"):
        check_storable(torch.zeros(3).to_sparse(), "s")
    with pytest.raises(CheckpointError, match="'m' is on the meta device"):
        check_storable(torch.zeros(3, device="meta"), "m")
    check_storable(torch.zeros(3, dtype=torch.bool), "ok")
