"""Structural hashes as users see them (64 lowercase hex chars) and as files hold them (32 bytes).

The hash identifies an architecture (flodl-graph computes it from the graph's structure); an
all-zero hash in a file means "none", and loading such a file skips the architecture check.
"""

from __future__ import annotations

from .._errors import ConfigError
from ._format import HASH_LEN, ZERO_HASH


def parse_hash(value: str | None, argument: str = "hash") -> bytes:
    """32 raw bytes from a 64-hex-char string; ``None`` -> all zeros."""
    if value is None:
        return ZERO_HASH
    if not isinstance(value, str):
        raise ConfigError(f"{argument} must be a hex string or None, got {type(value).__name__}")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raw = b""
    if len(raw) != HASH_LEN or len(value) != 2 * HASH_LEN:
        raise ConfigError(
            f"{argument} must be {2 * HASH_LEN} hex characters (a SHA-256), got {value!r}"
        )
    return raw


def hash_hex(raw: bytes) -> str | None:
    """Lowercase hex, or ``None`` for the all-zero "no hash"."""
    return None if raw == ZERO_HASH else raw.hex()
