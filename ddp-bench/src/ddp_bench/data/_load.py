"""One entry point: a dataset by name, cached per process (each rank loads it at most once)."""

from __future__ import annotations

import os
from pathlib import Path

from flodl_core import ConfigError

from ._bundle import DataBundle
from ._cifar import load_cifar10
from ._mnist import load_mnist
from ._shakespeare import load_shakespeare

_LOADERS = {"mnist": load_mnist, "cifar10": load_cifar10, "shakespeare": load_shakespeare}
_CACHE: dict[tuple[str, str, bool], DataBundle] = {}


def downloads_allowed() -> bool:
    """Downloads are on unless ``FLODL_OFFLINE`` is set (the switch ``fetch`` itself reads)."""
    return os.environ.get("FLODL_OFFLINE", "").strip().lower() not in {"1", "true", "yes", "on"}


def load_dataset(name: str, data_dir: str | Path, *, download: bool | None = None) -> DataBundle:
    """``"mnist"``, ``"cifar10"`` or ``"shakespeare"`` from ``data_dir`` and its fallbacks."""
    if name not in _LOADERS:
        raise ConfigError(f"unknown dataset {name!r}; expected one of {', '.join(_LOADERS)}")
    folder = Path(data_dir).expanduser().absolute()
    allow = downloads_allowed() if download is None else download
    key = (name, str(folder), allow)
    if key not in _CACHE:
        _CACHE[key] = _LOADERS[name](folder, download=allow)
    return _CACHE[key]
