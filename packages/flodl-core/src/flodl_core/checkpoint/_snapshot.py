"""A frozen CPU copy of a module's state, to be saved later (typically on a :class:`CpuWorker`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from torch import nn

from ._io import PathLike
from ._module import module_tensors
from ._save import write_checkpoint
from ._tensors import check_storable


class ModelSnapshot(Mapping[str, torch.Tensor]):
    """``state_dict`` name -> CPU tensor, copied at :meth:`capture` time.

    The copy is what makes background saving safe: training may go on updating the module
    while a worker thread writes the snapshot. It is a read-only mapping.
    """

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self._tensors = dict(tensors)

    @classmethod
    def capture(cls, module: nn.Module) -> ModelSnapshot:
        """Copy every tensor of ``module.state_dict()`` to the CPU (parameters, then buffers).

        Dtypes a ``.fdl`` file cannot hold are refused here, in the caller's thread, rather
        than later in the background.
        """
        out: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for name, t in module_tensors(module):
                check_storable(t, name)
                out[name] = t.detach().to("cpu", copy=True)
        return cls(out)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._tensors[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    @property
    def nbytes(self) -> int:
        """Bytes held by the copied tensors."""
        return sum(t.numel() * t.element_size() for t in self._tensors.values())

    def save(
        self, path: PathLike, hash: str | None = None, metadata: Mapping[str, str] | None = None
    ) -> None:
        """Write the snapshot as a ``.fdl`` file, exactly as :func:`save_checkpoint` would have
        written the module at capture time. ``hash`` defaults to none, as in floDl (Rust)."""
        write_checkpoint(path, list(self._tensors.items()), hash=hash, metadata=metadata)

    def __repr__(self) -> str:
        return f"ModelSnapshot({len(self)} tensors, {self.nbytes} bytes)"
