from __future__ import annotations

import pytest

from flodl_core import ConfigError
from flodl_core.checkpoint._hash import hash_hex, parse_hash


def test_parse_and_format_round_trip() -> None:
    hex_hash = "ab" * 32
    raw = parse_hash(hex_hash)
    assert raw == b"\xab" * 32 and hash_hex(raw) == hex_hash


def test_none_is_the_zero_hash() -> None:
    assert parse_hash(None) == bytes(32)
    assert hash_hex(bytes(32)) is None


@pytest.mark.parametrize("bad", ["ab" * 31, "ab" * 33, "zz" * 32, "", "ab" * 31 + "a b"])
def test_bad_hashes_name_the_argument(bad: str) -> None:
    with pytest.raises(ConfigError, match="expected_hash must be 64 hex characters"):
        parse_hash(bad, "expected_hash")


def test_non_string_hash_is_refused() -> None:
    with pytest.raises(ConfigError, match="hash must be a hex string or None, got bytes"):
        parse_hash(b"\x00" * 32)  # type: ignore[arg-type]
