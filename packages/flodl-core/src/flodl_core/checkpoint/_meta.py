"""Free-form ``dict[str, str]`` metadata carried inside a ``.fdl`` file.

It travels as one reserved entry, :data:`META_NAME`, holding compact UTF-8 JSON packed into an
i32 vector (padded with JSON whitespace to a multiple of 4 bytes). A Rust reader sees an ordinary
entry no model owns and lists it as skipped; Python readers hide it and expose the dict instead.

The same dict carries, under the reserved key :data:`CRC_KEY`, a CRC32 of each tensor entry's
raw bytes (JSON ``{name: crc}``), so a flipped byte in an uncompressed file is caught on load.
Files written without it (older files, the Rust writer) still load, reported "not verified".
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping

from .._errors import CheckpointError, ConfigError
from ._format import DType, Entry

META_NAME = "__flodl_meta__"
CRC_KEY = "flodl.crc32"


def check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """A validated copy of ``metadata`` (``None`` -> empty)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ConfigError(f"metadata must be a dict[str, str], got {type(metadata).__name__}")
    bad = [
        f"{k!r}: {type(v).__name__}"
        for k, v in metadata.items()
        if not isinstance(k, str) or not isinstance(v, str)
    ]
    if bad:
        raise ConfigError(f"metadata must map str to str; offending items: {', '.join(bad)}")
    if CRC_KEY in metadata:
        raise ConfigError(
            f"metadata key {CRC_KEY!r} is reserved for the file's checksums; rename that key"
        )
    return dict(metadata)


def crc32(data: object) -> int:
    """CRC32 of a buffer's raw bytes (``zlib.crc32``: fast, no copy of a memoryview)."""
    return zlib.crc32(data)  # type: ignore[arg-type]


def with_checksums(metadata: Mapping[str, str], crcs: Mapping[str, int]) -> dict[str, str]:
    """``metadata`` plus the reserved checksum item for the entries in ``crcs``."""
    out = dict(metadata)
    out[CRC_KEY] = json.dumps(dict(crcs), separators=(",", ":"), ensure_ascii=False)
    return out


def split_checksums(
    metadata: dict[str, str], source: str
) -> tuple[dict[str, str], dict[str, int] | None]:
    """``(user metadata, checksums)``; checksums are ``None`` for a file written without them."""
    raw = metadata.get(CRC_KEY)
    if raw is None:
        return metadata, None
    user = {k: v for k, v in metadata.items() if k != CRC_KEY}
    try:
        crcs = json.loads(raw)
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"checkpoint {source}: malformed {CRC_KEY!r} checksum table: {e}"
        ) from None
    if not isinstance(crcs, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in crcs.items()
    ):
        raise CheckpointError(
            f"checkpoint {source}: {CRC_KEY!r} must be a JSON object of entry name -> CRC32"
        )
    return user, crcs


def encode_metadata(metadata: Mapping[str, str]) -> tuple[tuple[int, ...], DType, bytes]:
    """``(shape, tag, bytes)`` of the reserved entry for a non-empty, validated dict."""
    raw = json.dumps(dict(metadata), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    data = raw.encode("utf-8")
    data += b" " * (-len(data) % 4)
    return (len(data) // 4,), DType.I32, data


def decode_metadata(entry: Entry, source: str) -> dict[str, str]:
    """The dict held by the reserved entry (read with its data)."""

    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {source}: malformed {META_NAME} entry: {why}")

    if entry.dtype is not DType.I32 or len(entry.shape) != 1:
        raise bad(f"expected a 1-d i32 vector, got {entry.dtype.label} {list(entry.shape)}")
    assert entry.data is not None
    try:
        value = json.loads(bytes(entry.data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(str(e)) from None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise bad("expected a JSON object of strings")
    return value
