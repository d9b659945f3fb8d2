"""What the bench trains and evaluates on, and where it came from."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

from flodl_core.data import TensorDataSet

from .._files import write_bytes_atomic as write_bytes_atomic


@dataclass(frozen=True)
class DataBundle:
    """A train split, a held-out split and a one-line description of their source.

    ``synthetic`` marks data that is not the real dataset (every log line and report row of a
    run that used it says so); ``vocab`` is the alphabet size of a text set.
    """

    name: str
    train: TensorDataSet
    test: TensorDataSet
    source: str
    synthetic: bool = False
    vocab: int | None = None

    @property
    def label(self) -> str:
        """``"mnist"`` or ``"cifar10 [synthetic]"``: the short tag of log lines and rows."""
        return f"{self.name} [synthetic]" if self.synthetic else self.name


def gzip_bytes(data: bytes) -> bytes:
    """gzip with a zero timestamp, so converting twice gives identical files."""
    return gzip.compress(data, mtime=0)


def find_first(folder: Path | None, names: tuple[str, ...]) -> Path | None:
    """The first of ``names`` that is a file in ``folder`` (``None`` folder: none)."""
    if folder is None:
        return None
    for n in names:
        if (folder / n).is_file():
            return folder / n
    return None
