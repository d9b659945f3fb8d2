"""The pipe between the training process and the dashboard's server process.

Training -> server (the server's stdin): messages of a one-byte kind, a 4-byte big-endian length
and a payload, almost always JSON encoded once in the training process and never decoded there.
Server -> training (the server's stdout): one JSON object per line, the start handshake
(``{"port": N}`` or ``{"error": "..."}``) then questions (``{"id": n, "get": "page"}``) that the
training process answers with a :data:`REPLY` message.
"""

from __future__ import annotations

import asyncio
import struct

HEADER = struct.Struct(">cI")

# Seeding, sent once when the server attaches, before any live message.
SEED_EPOCHS = b"s"  # JSON list of every epoch logged so far
SEED_ALERTS = b"a"  # JSON list of ready alert frames (str) for the /events replay
SEED_IDENTITY = b"i"  # a ready identity frame
SEED_COMPLETE = b"c"  # a ready complete frame
SEED_TREE = b"t"  # JSON snapshot of the record tree (see ``_remote.tree_snapshot``)
SEEDED = b"."  # seeding is done: the server starts listening (no page sees half a replay)
# Live events (JSON of one object each).
EPOCH = b"E"
IDENTITY = b"I"
COMPLETE = b"C"
ALERT = b"A"
RECORD = b"R"  # {"path", "step", "t", "metrics"}
REPLY = b"Q"  # {"id", "body", "error"}: the answer to a question from the server
STOP = b"X"  # close every stream and exit


def message(kind: bytes, payload: bytes = b"") -> bytes:
    """One framed message."""
    return HEADER.pack(kind, len(payload)) + payload


async def read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """The next ``(kind, payload)``; raises ``asyncio.IncompleteReadError`` at end of input
    (the training process went away)."""
    kind, size = HEADER.unpack(await reader.readexactly(HEADER.size))
    return kind, await reader.readexactly(size) if size else b""
