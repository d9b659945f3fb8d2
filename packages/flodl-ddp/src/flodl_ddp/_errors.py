"""The error a distributed run raises when a rank fails or the ranks disagree.

:class:`DdpError` carries where the failure happened (``rank``, ``host``) and, when the failure
happened in another process, that process's traceback as text (``remote_traceback``), so the
message read in the parent's log is enough to find the cause.
"""

from __future__ import annotations

from flodl_core import FlodlError


class DdpError(FlodlError, RuntimeError):
    """A distributed operation failed: a rank raised, died, hung, or the ranks disagree.

    Args:
        message: what went wrong and what to do about it.
        rank: the global rank at fault, when one is known.
        host: the host name of that rank, when known.
        remote_traceback: the traceback text captured in the failing process, when the
            failure crossed a process boundary; appended to ``str(error)``.
    """

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        host: str | None = None,
        remote_traceback: str | None = None,
    ) -> None:
        self.message = message
        self.rank = rank
        self.host = host
        self.remote_traceback = remote_traceback
        super().__init__(message)

    def __str__(self) -> str:
        where = []
        if self.rank is not None:
            where.append(f"rank {self.rank}")
        if self.host is not None:
            where.append(f"host {self.host}")
        text = f"[{', '.join(where)}] {self.message}" if where else self.message
        if self.remote_traceback:
            text = f"{text}\n--- traceback from the failing process ---\n{self.remote_traceback}"
        return text

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields would be lost by the default pickling of exceptions, and a
        # DdpError does travel between processes (a rank reports its failure to the parent).
        return (_rebuild, (self.message, self.rank, self.host, self.remote_traceback))


class PeerError(DdpError):
    """This rank failed because another one did: it stopped answering, died, or left an epoch
    early. The run's error names the other rank's own failure when there is one."""

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_peer, (self.message, self.rank, self.host, self.remote_traceback))


def _rebuild_peer(
    message: str, rank: int | None, host: str | None, remote_traceback: str | None
) -> PeerError:
    return PeerError(message, rank=rank, host=host, remote_traceback=remote_traceback)


def _rebuild(
    message: str, rank: int | None, host: str | None, remote_traceback: str | None
) -> DdpError:
    return DdpError(message, rank=rank, host=host, remote_traceback=remote_traceback)
