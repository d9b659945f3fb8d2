"""What rank processes tell the supervisor, as typed values (sent through one queue).

Every message names its rank and the rank process's generation (0 for a process started with
the run; a restarted elastic rank counts up), so a message from a process that has since been
replaced is never taken for its successor's. Those marked *elastic* come from elastic runs only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RankMessage:
    rank: int
    generation: int = 0


@dataclass(frozen=True)
class Epoch(RankMessage):
    metrics: Any = None  # an epoch's metrics (from the rank that leads it)


@dataclass(frozen=True)
class Report(RankMessage):
    progress: Any = None  # a progress report within an epoch


@dataclass(frozen=True)
class Final(RankMessage):  # the trained state is written: ``path`` (safetensors), merged timeline
    path: str = ""
    timeline: dict[str, Any] | None = None


@dataclass(frozen=True)
class Done(RankMessage):  # the rank delivered all it owed; its exit is only teardown from here
    fingerprint: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Failed(RankMessage):
    """The rank raised. ``echo``: the error is the echo of another rank's failure (a
    connection closed, a peer timed out), not a cause of its own."""

    host: str = ""
    text: str = ""
    traceback: str = ""
    echo: bool = False


@dataclass(frozen=True)
class Listening(RankMessage):
    ports: dict[str, int] = field(default_factory=dict)  # elastic: the ports the rank bound


@dataclass(frozen=True)
class Healed(RankMessage):  # elastic: the rank received a living peer's committed state
    epoch: int = 0
    cursor: int = 0


@dataclass(frozen=True)
class Counts(RankMessage):  # elastic: a window committed; the leader's ElChe counts for the next
    window: int = 0
    counts: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class RolledBack(RankMessage):  # elastic: a window did not commit (a peer died) and was rolled back
    epoch: int = 0
