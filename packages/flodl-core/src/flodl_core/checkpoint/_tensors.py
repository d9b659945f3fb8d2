"""Tensors <-> the raw bytes of a format entry, without per-element Python work.

Six dtypes have a tag. Narrower integer and bool tensors are stored widened, losslessly (a loader
converts back to the model's dtype); anything that cannot be stored exactly (complex, uint64,
float8 ...) is refused with the list of what can.
"""

from __future__ import annotations

import sys

import torch

from .._errors import CheckpointError
from ._format import Buffer, DType

TORCH_TO_TAG: dict[torch.dtype, DType] = {
    torch.float16: DType.F16,
    torch.bfloat16: DType.BF16,
    torch.float32: DType.F32,
    torch.float64: DType.F64,
    torch.int32: DType.I32,
    torch.int64: DType.I64,
}
TAG_TO_TORCH: dict[DType, torch.dtype] = {tag: dt for dt, tag in TORCH_TO_TAG.items()}

# Every value of the source dtype is exactly representable in the target.
_WIDEN: dict[torch.dtype, torch.dtype] = {
    torch.bool: torch.int32,
    torch.uint8: torch.int32,
    torch.int8: torch.int32,
    torch.int16: torch.int32,
    torch.uint16: torch.int32,
    torch.uint32: torch.int64,
}

_LITTLE = sys.byteorder == "little"


def _check_byteorder() -> None:
    # The format is little-endian and tensors are moved as raw memory; a big-endian host would
    # need a byte swap per element size, which no supported platform has needed.
    if not _LITTLE:
        raise CheckpointError(".fdl files need a little-endian host; this one is big-endian")


def storage_dtype(dtype: torch.dtype, name: str) -> torch.dtype:
    """The dtype a tensor named ``name`` of ``dtype`` is stored as, or an error saying why not."""
    if dtype in TORCH_TO_TAG:
        return dtype
    if dtype in _WIDEN:
        return _WIDEN[dtype]
    ok = ", ".join(str(d).removeprefix("torch.") for d in [*TORCH_TO_TAG, *_WIDEN])
    raise CheckpointError(
        f"{name!r} has dtype {dtype}, which a .fdl file cannot hold; supported: {ok}"
    )


def check_storable(t: torch.Tensor, name: str) -> None:
    """Refuse, up front, any tensor :func:`tensor_to_bytes` could not write."""
    storage_dtype(t.dtype, name)
    if t.layout is not torch.strided:
        raise CheckpointError(f"{name!r} is a {t.layout} tensor; .fdl files hold dense tensors")
    if t.is_meta:
        raise CheckpointError(f"{name!r} is on the meta device and has no values to save")


def storage_tag(dtype: torch.dtype, name: str) -> DType:
    return TORCH_TO_TAG[storage_dtype(dtype, name)]


def tensor_to_bytes(t: torch.Tensor, name: str) -> tuple[tuple[int, ...], DType, Buffer]:
    """``(shape, tag, bytes)`` of ``t``: a CPU, contiguous, little-endian view when possible.

    The returned buffer may share memory with ``t``; write it out before ``t`` changes.
    """
    t = t.detach()
    target = storage_dtype(t.dtype, name)
    t = t.to(device="cpu", dtype=target).contiguous()
    shape = tuple(t.shape)
    # numpy has no bfloat16: reinterpret the same 16 bits as int16.
    _check_byteorder()
    arr = (t.view(torch.int16) if target is torch.bfloat16 else t).numpy().reshape(-1)
    return shape, TORCH_TO_TAG[target], memoryview(arr).cast("B")


def tensor_from_bytes(data: Buffer, shape: tuple[int, ...], tag: DType) -> torch.Tensor:
    """A CPU tensor over ``data`` (no copy; ``data`` must be writable and not reused)."""
    _check_byteorder()
    dtype = TAG_TO_TORCH[tag]
    if memoryview(data).nbytes == 0:  # torch.frombuffer refuses empty buffers
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).reshape(shape)
