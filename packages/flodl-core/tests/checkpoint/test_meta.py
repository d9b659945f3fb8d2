from __future__ import annotations

import pytest

from flodl_core import CheckpointError, ConfigError
from flodl_core.checkpoint._format import DType, Entry
from flodl_core.checkpoint._meta import check_metadata, decode_metadata, encode_metadata


def entry(data: bytes, dtype: DType = DType.I32) -> Entry:
    return Entry("__flodl_meta__", (len(data) // 4,), dtype, len(data), bytearray(data))


@pytest.mark.parametrize("meta", [{"a": "b"}, {"frozen": "enc.w,enc.b", "ü": "∑ ✓"}, {"k": ""}])
def test_round_trip_packs_into_i32(meta: dict[str, str]) -> None:
    shape, tag, data = encode_metadata(meta)
    assert tag is DType.I32 and len(data) % 4 == 0 and shape == (len(data) // 4,)
    assert decode_metadata(entry(data), "f.fdl") == meta


def test_check_metadata() -> None:
    assert check_metadata(None) == {}
    with pytest.raises(ConfigError, match=r"offending items: 'n': int"):
        check_metadata({"n": 3})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="must be a dict"):
        check_metadata([("a", "b")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("data", "dtype", "why"),
    [
        (b"[1] ", DType.I32, "JSON object of strings"),
        (b'{"a"', DType.I32, "Expecting"),
        (b"\xff\xff\xff\xff", DType.I32, "utf-8"),
        (b"{}  ", DType.F32, "1-d i32 vector"),
    ],
)
def test_malformed_metadata_is_a_checkpoint_error(data: bytes, dtype: DType, why: str) -> None:
    with pytest.raises(CheckpointError, match=f"f.fdl: malformed __flodl_meta__ entry.*{why}"):
        decode_metadata(entry(data, dtype), "f.fdl")
