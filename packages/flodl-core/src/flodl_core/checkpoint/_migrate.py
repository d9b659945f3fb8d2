"""Carrying a checkpoint across a rename of the model's tensors."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from torch import nn

from .._errors import CheckpointError
from ._format import ZERO_HASH, Entry, encode_header, write_entry
from ._io import PathLike, atomic_write
from ._meta import META_NAME, encode_metadata, with_checksums
from ._module import module_tensors
from ._read import read_checkpoint
from ._tensors import storage_tag


@dataclass(frozen=True)
class MigrateReport:
    """How each tensor was matched.

    ``unchanged``: same name and shape. ``remapped``: ``(old, new)`` pairs matched by shape and
    dtype. ``dropped``: file tensors left unused. ``missing``: model tensors left unmatched.
    """

    unchanged: list[str] = field(default_factory=list)
    remapped: list[tuple[str, str]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def is_complete(self) -> bool:
        """Every file tensor was used and every model tensor found one."""
        return not self.dropped and not self.missing


def _same_file(a: str, b: str) -> bool:
    if os.path.abspath(a) == os.path.abspath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # dst does not exist yet
        return False


def migrate_checkpoint(src: PathLike, dst: PathLike, module: nn.Module) -> MigrateReport:
    """Rewrite checkpoint ``src`` under ``module``'s names into ``dst`` (gzip by each suffix).

    Matching, in order: (1) a model tensor whose name and shape are in the file keeps its
    entry; (2) each remaining model tensor (parameters, then buffers, model order) takes the
    first unused file entry of identical shape and dtype. ``dst`` is written as version 2 with
    no structural hash, so it loads without an architecture check; metadata is carried over.
    Only matched tensors are written; check ``is_complete`` on the report.
    """
    src, dst = os.fspath(src), os.fspath(dst)
    if _same_file(src, dst):
        raise CheckpointError(f"migrate_checkpoint: src and dst are the same file ({src})")
    ckpt = read_checkpoint(src)
    targets = [
        (name, tuple(t.shape), storage_tag(t.dtype, name)) for name, t in module_tensors(module)
    ]
    by_name = {e.name: e for e in ckpt.entries}
    used: set[str] = set()
    chosen: dict[str, Entry] = {}
    unchanged: list[str] = []
    remapped: list[tuple[str, str]] = []
    missing: list[str] = []

    for name, shape, _ in targets:
        e = by_name.get(name)
        if e is not None and e.shape == shape:
            chosen[name] = e
            used.add(name)
            unchanged.append(name)
    for name, shape, tag in targets:
        if name in chosen:
            continue
        match = next(
            (e for e in ckpt.entries if e.name not in used and e.shape == shape and e.dtype is tag),
            None,
        )
        if match is None:
            missing.append(name)
            continue
        chosen[name] = match
        used.add(match.name)
        remapped.append((match.name, name))
    dropped = [e.name for e in ckpt.entries if e.name not in used]

    written = [(name, chosen[name]) for name, _, _ in targets if name in chosen]
    with atomic_write(dst) as f:
        f.write(encode_header(ZERO_HASH, len(written) + 1))
        crcs: dict[str, int] = {}
        for name, e in written:
            assert e.data is not None
            crcs[name] = write_entry(f, name, e.shape, e.dtype, e.data)
        write_entry(f, META_NAME, *encode_metadata(with_checksums(ckpt.metadata, crcs)))
    return MigrateReport(unchanged=unchanged, remapped=remapped, dropped=dropped, missing=missing)
