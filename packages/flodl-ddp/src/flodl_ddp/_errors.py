"""The error a distributed run raises when a rank fails or the ranks disagree: it names where
(``rank``, ``host``) and carries another process's traceback as text, so the parent's log is
enough to find the cause.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any

from flodl_core import CheckpointError, FlodlError


class DdpError(FlodlError, RuntimeError):
    """A distributed operation failed: a rank raised, died, hung, or the ranks disagree.

    Args:
        message: what went wrong and what to do about it.
        rank: the global rank at fault, when one is known.
        host: the host name of that rank, when known.
        remote_traceback: the failing process's traceback text; appended to ``str(error)``.
    """

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        host: str | None = None,
        remote_traceback: str | None = None,
    ) -> None:
        self.message, self.rank, self.host = message, rank, host
        self.remote_traceback = remote_traceback
        super().__init__(message)

    def __str__(self) -> str:
        where = [f"{k} {v}" for k, v in (("rank", self.rank), ("host", self.host)) if v is not None]
        text = f"[{', '.join(where)}] {self.message}" if where else self.message
        if self.remote_traceback:
            text = f"{text}\n--- traceback from the failing process ---\n{self.remote_traceback}"
        return text

    def __reduce__(self) -> tuple[object, ...]:
        # a rank's failure reaches the parent pickled; the default would lose the keyword fields
        more = {"rank": self.rank, "host": self.host, "remote_traceback": self.remote_traceback}
        return (functools.partial(type(self), **more), (self.message,))


class PeerError(DdpError):
    """This rank failed because another one did: it stopped answering, died, or left an epoch
    early. The run's error names the other rank's own failure when there is one."""


def check_state_keys(owner: str, state: Mapping[str, Any], keys: Iterable[str]) -> None:
    """Raise :class:`CheckpointError` naming the first of ``keys`` that ``state`` lacks."""
    for key in keys:
        if key not in state:
            raise CheckpointError(f"{owner} state is missing the key {key!r}")
